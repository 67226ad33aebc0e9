"""Plain text from sanitized HTML: the body for full-text search, and the context
around each wiki link (for "backlinks with context").

Reading the *sanitized* output means the text is what the reader sees, raw HTML in
the note included.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html.parser import HTMLParser

from .sanitize import MARKER_ATTR

CONTEXT_WIDTH = 240

BLOCKS = {
    "p", "li", "h1", "h2", "h3", "h4", "h5", "h6", "td", "th", "dt", "dd", "pre",
    "blockquote", "div", "summary", "details", "caption", "figcaption", "figure",
    "table", "thead", "tbody", "tfoot", "tr", "ul", "ol", "dl",
}  # fmt: skip

# Pipeline furniture, not content: "¶" permalinks and footnote numbers / "↩".
SKIPPED_LINK_CLASSES = {"headerlink", "footnote-ref", "footnote-backref"}

_SPACES_RE = re.compile(r"\s+")


@dataclass
class _Block:
    tag: str
    parts: list[str] = field(default_factory=list)
    length: int = 0
    # (link index, start, end) of wiki links whose innermost block this is
    links: list[tuple[int, int, int | None]] = field(default_factory=list)

    def add(self, text: str) -> None:
        text = _SPACES_RE.sub(" ", text)
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


class _Extractor(HTMLParser):
    def __init__(self, nonce: str, drop: re.Pattern[str] | None):
        super().__init__(convert_charrefs=True)
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
        self.flat.append(data if self.pre else _SPACES_RE.sub(" ", data))
        self.blocks[-1].add(data)

    def close(self) -> None:
        super().close()
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


def extract(html: str, nonce: str, drop: re.Pattern[str] | None) -> Extracted:
    parser = _Extractor(nonce, drop)
    parser.feed(html)
    parser.close()
    lines = (line.strip() for line in "".join(parser.flat).split("\n"))
    return Extracted(
        text="\n".join(line for line in lines if line),
        link_order=parser.link_order,
        link_context=parser.link_context,
        tag_order=parser.tag_order,
    )
