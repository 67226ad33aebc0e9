"""Plain text from sanitized HTML: the body for full-text search, and the context
around each wiki link (for "backlinks with context").

Reading the *sanitized* output means the text is what the reader sees, raw HTML in
the note included. That output is the sanitizer's serialisation (html5ever): tags with
double-quoted attributes, "<" and ">" escaped in text, no comments, no scripts. So a
regex walks it, to the same events html.parser would give (tests/app/notebook/test_render_fast.py
checks both ways), at a third of the cost; anything unexpected ("<!", "<?") goes to
html.parser.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html import unescape
from html.parser import HTMLParser

from .sanitize import MARKER_ATTR

CONTEXT_WIDTH = 240

BLOCKS = {
    "p", "li", "h1", "h2", "h3", "h4", "h5", "h6", "td", "th", "dt", "dd", "pre",
    "blockquote", "div", "summary", "details", "caption", "figcaption", "figure",
    "table", "thead", "tbody", "tfoot", "tr", "ul", "ol", "dl",
}  # fmt: skip

# The tags whose start or end the extractor acts on.
_EVENTFUL = BLOCKS | {"a", "br", "hr"}

# Pipeline furniture, not content: "¶" permalinks and footnote numbers / "↩".
SKIPPED_LINK_CLASSES = {"headerlink", "footnote-ref", "footnote-backref"}

_SPACES_RE = re.compile(r"\s+")
# A start or end tag; attribute values quoted (a ">" may sit inside the quotes).
_TAG_RE = re.compile(r"""<(/?)([a-zA-Z][^\s/>]*)((?:[^>"']|"[^"]*"|'[^']*')*)>""")
_ATTR_RE = re.compile(r"""([^\s=/>]+)(?:\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s>]+)))?""")


@dataclass
class _Block:
    tag: str
    parts: list[str] = field(default_factory=list)
    length: int = 0
    # (link index, start, end) of wiki links whose innermost block this is
    links: list[tuple[int, int, int | None]] = field(default_factory=list)

    def add(self, text: str) -> None:
        """Text whose runs of white space are single spaces already."""
        if not self.parts or self.parts[-1].endswith(" "):
            text = text.lstrip(" ")
        if text:
            self.parts.append(text)
            self.length += len(text)


@dataclass
class Extracted:
    text: str
    link_order: list[int]  # wiki link indices in document order
    link_context: dict[int, str]
    tag_order: list[int]


class _Extractor:
    """Takes the parser's events (handle_starttag, handle_endtag, handle_data)."""

    def __init__(self, nonce: str, drop: re.Pattern[str] | None):
        self.marker_prefix = nonce + ":"
        self.drop = drop  # embed placeholders
        self.flat: list[str] = []
        self.blocks = [_Block("")]
        self.anchors: list[tuple[_Block, int] | None] = []  # open <a>s; wiki ones marked
        self.skip = 0
        self.pre = 0
        self.link_order: list[int] = []
        self.link_context: dict[int, str] = {}
        self.tag_order: list[int] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._open_anchor(dict(attrs))
        elif tag in ("br", "hr"):
            self._data_break()
        elif tag in BLOCKS:
            self.flat.append("\n")
            self.blocks.append(_Block(tag))
            if tag == "pre":
                self.pre += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "a":
            self._close_anchor()
        elif tag in BLOCKS and any(b.tag == tag for b in self.blocks[1:]):
            while True:
                block = self.blocks.pop()
                self._finish(block)
                if block.tag == "pre":
                    self.pre -= 1
                if block.tag == tag:
                    break
            self.flat.append("\n")

    def handle_data(self, data: str) -> None:
        if self.skip:
            return
        if self.drop is not None:
            data = self.drop.sub("", data)
        collapsed = _SPACES_RE.sub(" ", data)
        self.flat.append(data if self.pre else collapsed)
        self.blocks[-1].add(collapsed)

    def close(self) -> None:
        while self.blocks:
            self._finish(self.blocks.pop())

    def _data_break(self) -> None:
        if not self.skip:
            self.flat.append("\n")
            self.blocks[-1].add(" ")

    def _open_anchor(self, attrs: dict[str, str | None]) -> None:
        if self.skip:
            self.skip += 1
            self.anchors.append(None)
            return
        if SKIPPED_LINK_CLASSES & set((attrs.get("class") or "").split()):
            self.skip = 1
            self.anchors.append(None)
            return
        marker = attrs.get(MARKER_ATTR) or ""
        if marker.startswith(self.marker_prefix):
            kind, _, index = marker[len(self.marker_prefix) :].partition(":")
            if kind == "t":
                self.tag_order.append(int(index))
            elif kind == "w":
                block = self.blocks[-1]
                block.links.append((int(index), block.length, None))
                self.link_order.append(int(index))
                self.anchors.append((block, len(block.links) - 1))
                return
        self.anchors.append(None)

    def _close_anchor(self) -> None:
        if self.skip:
            self.skip -= 1
        opened = self.anchors.pop() if self.anchors else None
        if opened is not None:
            block, i = opened
            index, start, _ = block.links[i]
            block.links[i] = (index, start, block.length)

    def _finish(self, block: _Block) -> None:
        text = "".join(block.parts).rstrip()
        for index, start, end in block.links:
            self.link_context[index] = window(text, start, end or len(text))


def window(text: str, start: int, end: int, width: int = CONTEXT_WIDTH) -> str:
    """About `width` characters of `text` centred on text[start:end], cut at words."""
    if len(text) <= width:
        return text
    start, end = min(start, len(text)), min(max(end, start), len(text))
    pad = max(0, (width - (end - start)) // 2)
    lo = max(0, start - pad)
    hi = min(len(text), max(lo + width, end))
    lo = max(0, min(lo, hi - width))
    if lo > 0:
        space = text.find(" ", lo, start)
        lo = space + 1 if space != -1 else lo
    if hi < len(text):
        space = text.rfind(" ", end, hi)
        hi = space if space != -1 else hi
    return ("…" if lo > 0 else "") + text[lo:hi].strip() + ("…" if hi < len(text) else "")


def _scan(html: str, into: _Extractor) -> None:
    """html.parser's events for sanitized HTML, by regex. Inside <pre> (code: a <span> per
    token) the text between tags that change nothing is handed over as one piece, which
    gives the same text: there it is kept as is, and the block's copy collapses runs of
    white space across pieces anyway."""
    at = 0
    pending: list[str] = []  # text inside <pre> not handed over yet
    gather = into.drop is None
    for m in _TAG_RE.finditer(html):
        if m.start() > at:
            if into.pre and gather:
                pending.append(html[at:m.start()])
            else:
                into.handle_data(unescape(html[at:m.start()]))
        at = m.end()
        tag = m[2].lower()
        if tag not in _EVENTFUL:  # <span>, <code>, <em>...: the handlers do nothing
            continue
        if pending:
            into.handle_data(unescape("".join(pending)))
            pending.clear()
        if m[1]:
            into.handle_endtag(tag)
        elif tag == "a":  # the only tag whose attributes are read
            into.handle_starttag(tag, _attributes(m[3]))
        else:
            into.handle_starttag(tag, [])
        if m[3].endswith("/") and not m[1]:  # "<x/>": html.parser's handle_startendtag
            into.handle_endtag(tag)
    if pending:
        into.handle_data(unescape("".join(pending)))
    if at < len(html):
        into.handle_data(unescape(html[at:]))


def _attributes(text: str) -> list[tuple[str, str | None]]:
    found: list[tuple[str, str | None]] = []
    for m in _ATTR_RE.finditer(text):
        name, double, single, bare = m.groups()
        value = double if double is not None else single if single is not None else bare
        found.append((name.lower(), None if value is None else unescape(value)))
    return found


class _Parser(HTMLParser):
    """html.parser feeding an _Extractor: for HTML the regex walk does not expect."""

    def __init__(self, into: _Extractor):
        super().__init__(convert_charrefs=True)
        self.handle_starttag = into.handle_starttag  # type: ignore[method-assign]
        self.handle_endtag = into.handle_endtag  # type: ignore[method-assign]
        self.handle_data = into.handle_data  # type: ignore[method-assign]


def extract(html: str, nonce: str, drop: re.Pattern[str] | None) -> Extracted:
    parser = _Extractor(nonce, drop)
    if "<!" in html or "<?" in html:
        fallback = _Parser(parser)
        fallback.feed(html)
        fallback.close()
    else:
        _scan(html, parser)
    parser.close()
    lines = (line.strip() for line in "".join(parser.flat).split("\n"))
    return Extracted(
        text="\n".join(line for line in lines if line),
        link_order=parser.link_order,
        link_context=parser.link_context,
        tag_order=parser.tag_order,
    )
