"""Obsidian's callouts: a quote whose first line is `[!type] Title`.

    > [!warning] Mind the gap        a box with the type's icon and colour
    > [!tip]- Folded                 <details> closed; `+` open
    > > [!note] nested               callouts nest as quotes do

Python-Markdown joins quotes separated by a blank line into one; a callout starts a quote
of its own (and ends one), so two callouts in a row stay two, as they are in Obsidian.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as etree

from markdown.treeprocessors import Treeprocessor

from .bounded import SplitQuote

# The title follows the marker after any white space (a no-break space too, as vaults have).
CALLOUT_RE = re.compile(r"^[ \t]*\[!([A-Za-z][\w-]{0,30})\]([+-]?)\s*(.*)$")

# Obsidian's types and their aliases; anything else is shown as a note.
TYPES: dict[str, str] = {
    "note": "note",
    "abstract": "abstract", "summary": "abstract", "tldr": "abstract",
    "info": "info",
    "todo": "todo",
    "tip": "tip", "hint": "tip", "important": "tip",
    "success": "success", "check": "success", "done": "success",
    "question": "question", "help": "question", "faq": "question",
    "warning": "warning", "caution": "warning", "attention": "warning",
    "failure": "failure", "fail": "failure", "missing": "failure",
    "danger": "danger", "error": "danger",
    "bug": "bug",
    "example": "example",
    "quote": "quote", "cite": "quote",
}  # fmt: skip
CLASSES = {"callout", *(f"callout-{kind}" for kind in set(TYPES.values()))}


def _first_line(block: str) -> str:
    return block.split("\n", 1)[0]


def _is_callout(quote: etree.Element | None) -> bool:
    if quote is None or quote.tag != "blockquote" or not len(quote):
        return False
    first = quote[0]
    return first.tag == "p" and bool(CALLOUT_RE.match(_first_line(first.text or "")))


class CalloutQuoteProcessor(SplitQuote):
    """The bounded quote (bounded.SplitQuote), less the joining of a callout with the quote
    before or after it."""

    def run(self, parent: etree.Element, blocks: list[str]) -> None:
        block = blocks[0]
        m = self.RE.search(block)
        if m is None or block[: m.start()].strip():  # lines before it: the stock run
            return super().run(parent, blocks)
        quoted = [self.clean(line) for line in block[m.start() :].lstrip("\n").split("\n")]
        titled = CALLOUT_RE.match(quoted[0])
        if not (titled or _is_callout(self.lastChild(parent))):
            return super().run(parent, blocks)
        blocks.pop(0)
        # a quote of its own, where the stock run would join the quote before; its title
        # a paragraph of its own, so a list may start on the next line
        lines = [quoted[0], "", *self.content(quoted[1:])] if titled else self.content(quoted)
        quote = etree.SubElement(parent, "blockquote")
        self.parser.state.set("blockquote")
        self.parser.parseChunk(quote, "\n".join(lines))
        self.parser.state.reset()
        return None


class CalloutTreeprocessor(Treeprocessor):
    """Quotes that open with `[!type]` become callouts, before inline markdown runs (the
    title is markdown like any line)."""

    def run(self, root: etree.Element) -> None:
        for quote in [q for q in root.iter("blockquote") if _is_callout(q)]:
            first = quote[0]
            head, _, rest = (first.text or "").partition("\n")
            m = CALLOUT_RE.match(head)
            assert m is not None  # _is_callout
            written, fold, title = m[1].lower(), m[2], (m[3] or "").strip()
            kind = TYPES.get(written, "note")
            quote.attrib.clear()
            quote.set("class", f"callout callout-{kind}")
            if fold:
                quote.tag = "details"
                if fold == "+":
                    quote.set("open", "open")
                heading = etree.Element("summary")
            else:
                quote.tag = "div"
                heading = etree.Element("p")
            heading.set("class", "callout-title")
            heading.text = title or written.capitalize()
            if rest.strip():
                first.text = rest
            elif not len(first):
                quote.remove(first)
            quote.insert(0, heading)
