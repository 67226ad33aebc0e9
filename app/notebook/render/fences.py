"""Fenced code where the line pass does not reach.

lists.py reads the fences at the top level, in list items and in quotes (a quote's text
goes through it too), line by line; a fence in an admonition's indented body is left for
the block parser, which made a paragraph of it and the backticks inline code.
`NestedFences` is a block processor: asked for each block of such a body, it takes a
block that opens with a fence and every block up to the one that closes it, and renders
the code as fenced_code does (through codehilite).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as etree

from markdown.blockprocessors import BlockProcessor
from markdown.extensions.codehilite import CodeHilite, CodeHiliteExtension

# an opening line: three or more backticks or tildes, an optional language; in a tight
# list item's text its lines after the first keep their indentation
_OPEN = r"^(?P<indent>{})(?P<fence>`{{3,}}|~{{3,}})[ \t]*\.?(?P<lang>[\w#.+-]*)[ \t]*$"
_OPEN_RE = re.compile(_OPEN.format(""), re.MULTILINE)
_OPEN_IN_ITEM_RE = re.compile(_OPEN.format("[ ]*"), re.MULTILINE)
LOOKAHEAD = 50  # blocks searched for the closing fence (blank lines inside the code)


class NestedFences(BlockProcessor):
    """A fence may open a block or end the paragraph before it (as CommonMark's may)."""

    def _open(self, parent: etree.Element, block: str) -> re.Match[str] | None:
        if "```" not in block and "~~~" not in block:
            return None
        return _open_re(parent).search(block)

    def test(self, parent: etree.Element, block: str) -> bool:
        return self._open(parent, block) is not None

    def run(self, parent: etree.Element, blocks: list[str]) -> bool | None:
        m = self._open(parent, blocks[0])
        assert m is not None
        closing = _closing(m)
        text = blocks[0][m.end() + 1:]
        for taken in range(1, min(len(blocks), LOOKAHEAD) + 1):
            if taken > 1:
                text += "\n\n" + blocks[taken - 1]
            close = closing.search(text)
            if close:
                break
        else:
            return False  # never closed: not a fenced block (as fenced_code)
        before = blocks[0][:m.start()]
        del blocks[:taken]
        # and the fences after it in this block, here: handing the rest back to the parser
        # after each would copy it once per fence
        done = 0
        while True:
            if before.strip():
                self.parser.parseBlocks(parent, [before.rstrip("\n")])
            self._code(parent, m, text[done:close.start()])
            done = close.end() + 1
            m = _open_re(parent).search(text, done)
            close = _closing(m).search(text, m.end() + 1) if m else None
            if close is None:
                break
            before, done = text[done:m.start()], m.end() + 1
        rest = text[done:]
        if rest.strip():
            blocks.insert(0, rest)
        return None

    def _code(self, parent: etree.Element, m: re.Match[str], code: str) -> None:
        indent = re.compile(rf"^[ ]{{0,{len(m['indent'])}}}", re.MULTILINE)
        p = etree.SubElement(parent, "p")
        html = self._highlight(indent.sub("", code), m["lang"] or None)
        p.text = self.parser.md.htmlStash.store(html)

    def _highlight(self, code: str, lang: str | None) -> str:
        config = next(ext.getConfigs() for ext in self.parser.md.registeredExtensions
                      if isinstance(ext, CodeHiliteExtension))
        config = dict(config)
        style = config.pop("pygments_style", "default")
        return CodeHilite(code, lang=lang, style=style, **config).hilite(shebang=False)


def _closing(opening: re.Match[str]) -> re.Pattern[str]:
    """A closing fence: the opening's character, at least as many times."""
    fence = opening["fence"]
    return re.compile(rf"^[ ]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$", re.MULTILINE)


def _open_re(parent: etree.Element) -> re.Pattern[str]:
    return _OPEN_IN_ITEM_RE if parent.tag == "li" else _OPEN_RE
