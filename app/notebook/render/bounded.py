"""Bounds on the work a note can make Python-Markdown do: hostile or just odd text must
render in time linear in its length, and never overflow the stack.

- A heading or an admonition's first line ends the paragraph before it in the stock
  parser too (their processors search the whole block and split it there), but each split
  pushes the rest of the block back as a new string: a block of n such lines cost n copies
  of itself. `SplitBlocks` puts a blank line before each such line up front, which is the
  same document, split once.
- Each ">" of a quote is a level of recursion in the block parser; `SplitBlocks` keeps the
  first `MAX_QUOTE_DEPTH` of a line's markers and drops the rest (a deeper quote renders
  flattened at that depth).
- Lists and quotes nested a few hundred deep (`- - - x`, `> - > - x`, an indent per line)
  recurse past Python's limit in the block parser; such a note is rendered again with
  every line's leading markers and indentation taken off (`flattened`): its text, not its
  nesting.
- Python's html.parser, which finds raw HTML blocks, looks for the end of every "<tag" to
  the end of the text when it has none: n of them cost n scans. `BoundedHtmlBlocks` says
  at once that a "<" after the text's last ">" starts no tag, which is what the scan finds.
"""

from __future__ import annotations

import re

from markdown.htmlparser import HTMLExtractor
from markdown.preprocessors import HtmlBlockPreprocessor, Preprocessor

MAX_QUOTE_DEPTH = 32

# After a non-blank line: an ATX heading (the space after the hashes, as
# syntax.SpacedHashHeaderProcessor wants it) or admonition's first line (its RE, whole).
_SPLIT_BEFORE_RE = re.compile(
    r"(?<=[^\n])\n(?=#{1,6}(?:[ \t]|\n|$)"
    r'|!!! ?[\w\-]+(?: +[\w\-]+)*(?: +"[^\n]*?")? *(?:\n|$))'
)
_DEEP_QUOTE_RE = re.compile(rf"^((?:[ ]{{0,3}}>){{{MAX_QUOTE_DEPTH}}})(?:[ ]{{0,3}}>)+",
                            re.MULTILINE)


_NESTING_RE = re.compile(r"^(?:[ \t>]|(?:[-*+]|\d{1,9}[.)])(?=[ \t]))+", re.MULTILINE)


def flattened(source: str) -> str:
    """The text without what nests it: each line's leading indentation, quote and list
    markers removed."""
    return _NESTING_RE.sub("", source)


class SplitBlocks(Preprocessor):
    """Runs after fenced code and raw HTML blocks are stashed, so neither is touched."""

    def run(self, lines: list[str]) -> list[str]:
        text = "\n".join(lines)
        text = _DEEP_QUOTE_RE.sub(r"\1", text)
        return _SPLIT_BEFORE_RE.sub("\n\n", text).split("\n")


class _Extractor(HTMLExtractor):
    _scanned: tuple[str, int] = ("", -1)  # (rawdata, where its last ">" is)

    def check_for_whole_start_tag(self, i: int) -> int:
        # html.parser trims rawdata as it goes: find its last ">" again when it changes
        if self._scanned[0] is not self.rawdata:
            self._scanned = (self.rawdata, self.rawdata.rfind(">"))
        if i > self._scanned[1]:
            return -1  # no ">" left: incomplete, and so text
        return super().check_for_whole_start_tag(i)


class BoundedHtmlBlocks(HtmlBlockPreprocessor):
    def run(self, lines: list[str]) -> list[str]:
        parser = _Extractor(self.md)
        parser.feed("\n".join(lines))
        parser.close()
        return "".join(parser.cleandoc).split("\n")
