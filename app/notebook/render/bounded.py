"""Bounds on the work a note can make Python-Markdown do: hostile or just odd text must
render in time linear in its length, and never overflow the stack.

- A heading, a rule or an admonition's first line ends the paragraph before it in the
  stock parser too (their processors search the whole block and split it there), and a
  setext heading's underline ends its block; but each split pushes the rest of the block
  back as a new string: a block of n such lines cost n copies of itself. `SplitBlocks`
  puts the blank lines in up front: the same document, split once.
- Each ">" of a quote is a level of recursion in the block parser; `SplitBlocks` keeps the
  first `MAX_QUOTE_DEPTH` of a line's markers and drops the rest (a deeper quote renders
  flattened at that depth).
- Lists and quotes nested a few hundred deep (`- - - x`, `> - > - x`, an indent per line)
  recurse past Python's limit in the block parser; such a note is rendered again with
  every line's leading markers and indentation taken off (`flattened`): its text, not its
  nesting.
- Footnotes were numbered by searching a list of them per reference (`NumberedFootnotes`
  keeps a table).
- Python's html.parser, which finds raw HTML blocks, looks for the end of every "<tag" to
  the end of the text when it has none: n of them cost n scans. `BoundedHtmlBlocks` says
  at once that a "<" after the text's last ">" starts no tag, which is what the scan finds.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as etree

from markdown.blockprocessors import BlockQuoteProcessor
from markdown.extensions.footnotes import FootnoteInlineProcessor
from markdown.htmlparser import HTMLExtractor
from markdown.preprocessors import HtmlBlockPreprocessor, Preprocessor

from .lists import ListsAndFences

MAX_QUOTE_DEPTH = 32

# An ATX heading (the space after the hashes, as syntax.SpacedHashHeaderProcessor wants
# it) or an admonition's first line (its RE, whole).
_SPLITS_RE = re.compile(r'#{1,6}(?:[ \t]|$)|!!! ?[\w\-]+(?: +[\w\-]+)*(?: +"[^\n]*?")? *$')


_SETEXT_RE = re.compile(r"[=-]+[ ]*$")  # SetextHeaderProcessor's underline


def _is_rule(line: str) -> bool:
    """A thematic break of "*" or "_" (as HRProcessor's RE; "-" lines may underline a
    setext heading, which is another processor's split)."""
    body = line.rstrip(" ")
    marks = body.lstrip(" ")
    if len(body) - len(marks) > 3 or len(marks) < 3 or marks[0] not in "*_":
        return False
    return marks.replace(" ", "") == marks[0] * marks.count(marks[0]) and "   " not in marks


_DEEP_QUOTE_RE = re.compile(rf"^((?:[ ]{{0,3}}>){{{MAX_QUOTE_DEPTH}}})(?:[ ]{{0,3}}>)+",
                            re.MULTILINE)


_NESTING_RE = re.compile(r"^(?:[ \t>]|(?:[-*+]|\d{1,9}[.)])(?=[ \t]))+", re.MULTILINE)


def flattened(source: str) -> str:
    """The text without what nests it: each line's leading indentation, quote and list
    markers removed."""
    return _NESTING_RE.sub("", source)


def split_blocks(lines: list[str]) -> list[str]:
    """The lines, with a blank line wherever the block parser would split its block at
    that line anyway. A block whose first line is indented is left whole (the list-indent
    processor takes all of it into the list item before it, headings and all), and so are
    a table's rules (the table processor, asked before the rule's, takes every line for a
    row). A setext heading's block is split after its underline where nothing asked
    before the setext processor would take the block: its first line neither indented,
    nor a table's, nor a heading's or admonition's."""
    out: list[str] = []
    first = ""  # the current block's first line; "" between blocks
    at = 0  # the line's place in its block
    for line in lines:
        if not line:
            first = ""
        elif not first:
            first, at = line, 0
        elif not first.startswith("    ") and (
                _SPLITS_RE.match(line) or ("|" not in first and _is_rule(line))):
            out.append("")
            first, at = line, 0
        elif at == 1 and _SETEXT_RE.match(line) and _plain(first):
            out += (line, "")
            first = ""
            continue
        at += 1
        out.append(line)
    return out


class SplitBlocks(Preprocessor):
    """`split_blocks` on the whole text, after fenced code and raw HTML blocks are stashed
    (so neither is touched), with quotes cut to `MAX_QUOTE_DEPTH`."""

    def run(self, lines: list[str]) -> list[str]:
        return split_blocks(_DEEP_QUOTE_RE.sub(r"\1", "\n".join(lines)).split("\n"))


class SplitQuote(BlockQuoteProcessor):
    """The stock quote, whose text (its lines less their ">") goes through the pass that
    reads lists and fences (lists.ListsAndFences, the one registered in fenced_code's
    place) and `split_blocks` before it is parsed: a quote is a document of its own."""

    def run(self, parent, blocks: list[str]) -> None:
        block = blocks.pop(0)
        m = self.RE.search(block)
        if m:
            self.parser.parseBlocks(parent, [block[:m.start()]])
            block = "\n".join(self.clean(line) for line in block[m.start():].split("\n"))
        sibling = self.lastChild(parent)
        quote = sibling if sibling is not None and sibling.tag == "blockquote" else (
            etree.SubElement(parent, "blockquote"))
        self.parser.state.set("blockquote")  # as stock: quotes in lists get <p>
        self.parser.parseChunk(quote, "\n".join(self.content(block.split("\n"))))
        self.parser.state.reset()

    def content(self, lines: list[str]) -> list[str]:
        """The quote's lines (less their ">") as the parser is to read them."""
        lists = self.parser.md.preprocessors["fenced_code_block"]
        if isinstance(lists, ListsAndFences):
            lines = lists.run(lines)
            # the blank lines it puts around a block would end up inside the quote's first
            # or last paragraph (the parser splits its text only between blocks)
            while lines and not lines[-1]:
                lines.pop()
            start = next((n for n, line in enumerate(lines) if line), len(lines))
            lines = lines[start:]
        return self.split(lines)

    def split(self, lines: list[str]) -> list[str]:
        return split_blocks(lines)


def _plain(first: str) -> bool:
    return not (first.startswith("    ") or "|" in first or _SPLITS_RE.match(first))


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


class _Positions:
    """Where each item of a list (or each key of a dict) is, kept while it is the same
    object and grows only through `add`."""

    def __init__(self) -> None:
        self.of: object = None
        self.size = -1
        self.table: dict[str, int] = {}

    def get(self, items) -> dict[str, int]:
        if self.of is not items or self.size != len(items):
            self.table = {}
            for i, key in enumerate(items):
                self.table.setdefault(key, i)
            self.of, self.size = items, len(items)
        return self.table

    def add(self, items: list[str], key: str) -> None:
        items.append(key)
        self.table[key] = len(items) - 1
        self.size = len(items)


class NumberedFootnotes(FootnoteInlineProcessor):
    """The stock footnote reference (addFootnoteRef and numbering), with the lists it
    searched per reference kept as tables."""

    def __init__(self, pattern: str, footnotes) -> None:
        super().__init__(pattern, footnotes)
        self._referenced, self._defined = _Positions(), _Positions()

    def handleMatch(self, m: re.Match[str], data: str):  # type: ignore[override]
        ext, id_ = self.footnotes, m.group(1)
        if id_ not in ext.footnotes:
            return None, None, None
        order = ext.footnote_order
        referenced = self._referenced.get(order)
        if id_ not in referenced:
            self._referenced.add(order, id_)
        if ext.getConfig("USE_DEFINITION_ORDER"):
            number = self._defined.get(ext.footnotes)[id_] + 1
        else:
            number = referenced[id_] + 1
        sup = etree.Element("sup")
        a = etree.SubElement(sup, "a")
        sup.set("id", ext.makeFootnoteRefId(id_, found=True))
        a.set("href", "#" + ext.makeFootnoteId(id_))
        a.set("class", "footnote-ref")
        a.text = ext.getConfig("SUPERSCRIPT_TEXT").format(number)
        return sup, m.start(0), m.end(0)
