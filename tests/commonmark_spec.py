"""The CommonMark spec's examples (tests/data/commonmark/spec.txt), the normaliser both
sides of a comparison go through, and a pass count by section.

    python -m tests.commonmark_spec              # the table
    python -m tests.commonmark_spec "List items" # and that section's failures, side by side

The normaliser follows the spec's own test/normalize.py (whitespace collapsed outside <pre>
and dropped around block tags, attributes sorted, character references written as the
characters they stand for), and on top of it ignores what the notebook adds for its pages
rather than for the markdown:

- the attributes `id`, `class` and `rel` (heading anchors, footnote ids, code languages,
  link rel), on both sides;
- the permalink each heading carries (`<a class="headerlink">`), element and text;
- syntax highlighting: a `<div class="highlight">` is unwrapped, and so is every `<span>`
  inside a `<pre>` (their text stays);
- percent-encoding in `href` and `src` (`%20` and a space are the same address).
"""

from __future__ import annotations

import html
import re
import sys
from collections import Counter
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote

SPEC = Path(__file__).parent / "data" / "commonmark" / "spec.txt"
_FENCE = "`" * 32
_HEADING_RE = re.compile(r"#+ ")


@dataclass(frozen=True)
class Example:
    number: int
    section: str
    markdown: str
    html: str


def examples() -> list[Example]:
    """Every example, read as the spec's test/spec_tests.py reads them ("→" is a tab)."""
    found: list[Example] = []
    section, state, markdown_lines, html_lines = "", 0, [], []
    for line in SPEC.read_text(encoding="utf-8").splitlines(keepends=True):
        stripped = line.strip()
        if stripped == _FENCE + " example":
            state = 1
        elif state == 2 and stripped == _FENCE:
            found.append(Example(len(found) + 1, section,
                                 "".join(markdown_lines).replace("→", "\t"),
                                 "".join(html_lines).replace("→", "\t")))
            state, markdown_lines, html_lines = 0, [], []
        elif state == 1 and stripped == ".":
            state = 2
        elif state == 1:
            markdown_lines.append(line)
        elif state == 2:
            html_lines.append(line)
        elif _HEADING_RE.match(line):
            section = line.split(" ", 1)[1].strip()
    return found


_BLOCK_TAGS = {
    "article", "header", "aside", "hgroup", "blockquote", "hr", "iframe", "body", "li", "map",
    "button", "object", "canvas", "ol", "caption", "output", "col", "p", "colgroup", "pre",
    "dd", "progress", "div", "section", "dl", "table", "td", "dt", "tbody", "embed",
    "textarea", "fieldset", "tfoot", "figcaption", "th", "figure", "thead", "footer", "tr",
    "form", "ul", "h1", "h2", "h3", "h4", "h5", "h6", "video", "script", "style",
}  # fmt: skip
_VOID_TAGS = {"br", "hr", "img", "input", "wbr", "col", "embed", "source"}
_IGNORED_ATTRIBUTES = {"id", "class", "rel"}
_SPACE_RE = re.compile(r"\s+")


class _Normaliser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out = ""
        self.last = "starttag"  # what came last: starttag, endtag or data
        self.last_tag = ""
        self.in_pre = 0
        self.dropped = 0  # depth inside an element dropped with its text
        self.stack: list[tuple[str, str]] = []  # (tag, "keep" | "unwrap" | "drop")

    def _action(self, tag: str, attrs: dict[str, str | None]) -> str:
        classes = (attrs.get("class") or "").split()
        if self.dropped or (tag == "a" and "headerlink" in classes):
            return "drop"
        if (tag == "div" and "highlight" in classes) or (tag == "span" and self.in_pre):
            return "unwrap"
        return "keep"

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        action = self._action(tag, dict(attrs))
        if tag not in _VOID_TAGS:
            self.stack.append((tag, action))
        if action == "drop":
            self.dropped += tag not in _VOID_TAGS
            return
        if action == "unwrap":
            return
        if tag == "pre":
            self.in_pre += 1
        if tag in _BLOCK_TAGS:
            self.out = self.out.rstrip()
        self.out += "<" + tag
        for name, value in sorted(attrs):
            if name in _IGNORED_ATTRIBUTES:
                continue
            if name in ("href", "src") and value is not None:
                value = unquote(value)
            self.out += f' {name}="{html.escape(value)}"' if value is not None else f" {name}"
        self.out += ">"
        self.last_tag, self.last = tag, "endtag" if tag in _VOID_TAGS else "starttag"

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _VOID_TAGS:
            self.handle_starttag(tag, attrs)
        else:  # "<p/>": an element with nothing in it
            self.handle_starttag(tag, attrs)
            self.handle_endtag(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag in _VOID_TAGS:
            return
        while self.stack:
            open_tag, action = self.stack.pop()
            if action == "drop":
                self.dropped -= 1
            elif action == "keep":
                self._close(open_tag)
            if open_tag == tag:
                return

    def _close(self, tag: str) -> None:
        if tag == "pre":
            self.in_pre -= 1
        elif tag in _BLOCK_TAGS:
            self.out = self.out.rstrip()
        self.out += f"</{tag}>"
        self.last_tag, self.last = tag, "endtag"

    def handle_data(self, data: str) -> None:
        if self.dropped:
            return
        after_block = self.last in ("starttag", "endtag") and self.last_tag in _BLOCK_TAGS
        if self.last in ("starttag", "endtag") and self.last_tag == "br":
            data = data.lstrip("\n")
        if not self.in_pre:
            data = _SPACE_RE.sub(" ", data)
            if after_block:
                data = data.lstrip() if self.last == "starttag" else data.strip()
        self.out += html.escape(data, quote=True)
        self.last = "data"

    def handle_comment(self, data: str) -> None:
        self.out += f"<!--{data}-->"
        self.last = "comment"


def normalise(markup: str) -> str:
    parser = _Normaliser()
    parser.feed(markup)
    parser.close()
    while parser.stack:  # elements left open: closed at the end, as a browser would
        parser.handle_endtag(parser.stack[-1][0])
    return parser.out.strip()


def results(to_html) -> list[tuple[Example, str, bool]]:
    """(example, the HTML it rendered to, whether that normalises to the spec's)."""
    out = []
    for example in examples():
        got = to_html(example.markdown)
        out.append((example, got, normalise(got) == normalise(example.html)))
    return out


def by_section(scored: list[tuple[Example, str, bool]]) -> dict[str, tuple[int, int]]:
    """section -> (passed, total), in the spec's order."""
    passed: Counter[str] = Counter()
    total: Counter[str] = Counter()
    for example, _, ok in scored:
        total[example.section] += 1
        passed[example.section] += ok
    return {section: (passed[section], total[section]) for section in total}


def table(scored: list[tuple[Example, str, bool]]) -> str:
    rows = [f"{section:<40} {p:>4}/{t:<4} {100 * p / t:5.1f}%"
            for section, (p, t) in by_section(scored).items()]
    p = sum(ok for _, _, ok in scored)
    rows.append(f"{'all':<40} {p:>4}/{len(scored):<4} {100 * p / len(scored):5.1f}%")
    return "\n".join(rows)


def _main(sections: list[str]) -> None:
    from app.notebook import render

    scored = results(lambda source: render.render(source).html)
    print(table(scored))
    for example, got, ok in scored:
        if example.section in sections and not ok:
            print(f"\n--- example {example.number} ({example.section})\n{example.markdown}"
                  f"--- want\n{normalise(example.html)}\n--- got\n{normalise(got)}")


if __name__ == "__main__":
    _main(sys.argv[1:])
