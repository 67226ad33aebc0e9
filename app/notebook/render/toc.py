"""The toc extension's tree pass (heading ids, permalinks, the table of contents), in time
linear in the headings.

The stock pass renders each heading's inner HTML by serializing it and running every
postprocessor over the result, then strips tags and slugifies with regexes looked up per
call, and nests the tokens by popping the front of a list (a copy of the rest per
heading); then it builds the table as elements, prettifies and serializes them. Here a
heading that is plain text (no child elements, no placeholder, no escape) gets the same
inner HTML by escaping its text, which is all that the serializing, unescaping and the
known postprocessors do to it, and the table is written as the text those three steps
make; anything else takes the stock route. tests/app/notebook/test_render_fast.py
renders a corpus both ways.
"""

from __future__ import annotations

import html
import xml.etree.ElementTree as etree
from typing import Any

from markdown.extensions.footnotes import FootnotePostprocessor
from markdown.extensions.toc import (
    TocTreeprocessor,
    escape_cdata,
    remove_fnrefs,
    render_inner_html,
    run_postprocessors,
    strip_tags,
    unescape,
    unique,
)
from markdown.postprocessors import AndSubstitutePostprocessor, RawHtmlPostprocessor
from markdown.serializers import _escape_attrib_html, _escape_cdata, to_html_string
from markdown.treeprocessors import PrettifyTreeprocessor

# The postprocessors that change nothing in text without an STX (each replaces only
# placeholders that start with one).
_PLAIN_POSTPROCESSORS = (RawHtmlPostprocessor, FootnotePostprocessor,
                         AndSubstitutePostprocessor)
_STX = "\x02"


def nest(tokens: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """toc.nest_toc_tokens (the same nesting, wrong orders included), walking the list
    instead of popping its front."""
    ordered: list[dict[str, Any]] = []
    if not tokens:
        return ordered
    last = tokens[0]
    last["children"] = []
    levels = [last["level"]]
    ordered.append(last)
    parents: list[dict[str, Any]] = []
    for t in tokens[1:]:
        level = t["level"]
        t["children"] = []
        if level < levels[-1]:
            levels.pop()
            to_pop = 0
            for p in reversed(parents):
                if level <= p["level"]:
                    to_pop += 1
                else:
                    break
            if to_pop:
                levels = levels[:-to_pop]
                parents = parents[:-to_pop]
            levels.append(level)
        if level == levels[-1]:
            (parents[-1]["children"] if parents else ordered).append(t)
        else:
            last["children"].append(t)
            parents.append(last)
            levels.append(level)
        last = t
    return ordered


class Toc(TocTreeprocessor):
    """TocTreeprocessor.run, its per-heading work done once for plain headings."""

    def _writes_plainly(self) -> bool:
        """Whether the table comes out as `_table` writes it: no title or marker, the stock
        prettifier and HTML serializer, and div, ul and li block-level (a not)."""
        md = self.md
        prettify = md.treeprocessors["prettify"] if "prettify" in md.treeprocessors else None
        return (not self.title and not self.marker and type(prettify) is PrettifyTreeprocessor
                and md.serializer is to_html_string and not md.is_block_level("a")
                and all(md.is_block_level(tag) for tag in ("div", "ul", "li")))

    def _table(self, tokens: list[dict[str, Any]]) -> str:
        """The serialized, prettified build_toc_div(tokens)."""
        out = [f'<div class="{_escape_attrib_html(self.toc_class)}">\n']

        def write(items: list[dict[str, Any]]) -> None:
            out.append("<ul>\n" if items else "<ul>")  # prettify: a newline before a block
            for item in items:
                name = item.get("name", "")
                href = _escape_attrib_html("#" + item.get("id", ""))
                out.append(f'<li><a href="{href}">{_escape_cdata(name) if name else ""}</a>')
                if item["children"]:
                    write(item["children"])
                out.append("</li>\n")
            out.append("</ul>\n")

        write(tokens)
        out.append("</div>\n")
        return "".join(out)

    def _plain_postprocessors(self) -> bool:
        return all(type(pp) in _PLAIN_POSTPROCESSORS for pp in self.md.postprocessors)

    def _inner_html(self, el: etree.Element, plain_post: bool) -> str:
        text = el.text or ""
        if (plain_post and not len(el) and _STX not in text and _STX not in (el.tail or "")
                and not any(v and _STX in v for v in el.attrib.values())):
            return _escape_cdata(text).strip()
        return render_inner_html(remove_fnrefs(el), self.md)

    def run(self, doc: etree.Element) -> None:
        used_ids = {el.attrib["id"] for el in doc.iter() if "id" in el.attrib}
        id_counters: dict[str, int] = {}
        plain_post = self._plain_postprocessors()

        toc_tokens = []
        for el in doc.iter():
            if isinstance(el.tag, str) and self.header_rgx.match(el.tag):
                self.set_level(el)
                innerhtml = self._inner_html(el, plain_post)
                name = " ".join(innerhtml.split()) if "<" not in innerhtml else (
                    strip_tags(innerhtml))

                if "id" not in el.attrib:
                    el.attrib["id"] = unique(self.slugify(html.unescape(name), self.sep),
                                             used_ids, id_counters)

                data_toc_label = ""
                if "data-toc-label" in el.attrib:
                    data_toc_label = run_postprocessors(unescape(el.attrib["data-toc-label"]),
                                                        self.md)
                    name = escape_cdata(strip_tags(data_toc_label))
                    del el.attrib["data-toc-label"]

                level = int(el.tag[-1])
                if self.toc_top <= level <= self.toc_bottom:
                    elem_id = el.attrib["id"]
                    toc_tokens.append({
                        "level": level,
                        "id": unescape(elem_id) if _STX in elem_id else elem_id,
                        "name": name,
                        "html": innerhtml,
                        "data-toc-label": data_toc_label,
                    })

                if self.use_anchors:
                    self.add_anchor(el, el.attrib["id"])
                if self.use_permalinks not in [False, None]:
                    self.add_permalink(el, el.attrib["id"])

        toc_tokens = nest(toc_tokens)
        if self._writes_plainly():
            toc = self._table(toc_tokens)
        else:
            div = self.build_toc_div(toc_tokens)
            if self.marker:
                self.replace_marker(doc, div)
            toc = self.md.serializer(div)
        for pp in self.md.postprocessors:
            toc = pp.run(toc)
        self.md.toc_tokens = toc_tokens  # type: ignore[attr-defined]
        self.md.toc = toc  # type: ignore[attr-defined]
