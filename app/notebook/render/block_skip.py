"""Python-Markdown's block loop, less the tests that cannot succeed.

For every block (a paragraph, mostly) the stock parser asks each block processor in turn
whether the block is its kind, most of them by a regex search through the whole block:
is it a quote, a heading, a setext heading, a rule, a list, a reference definition...
The answer is nearly always no, and was a quarter of a render's block parsing.

Here a processor is asked only when the block holds what its kind cannot do without: a
quote a ">", a table a "|", a "#" heading a "#", a reference definition "]:", a list its
marker first, an admonition "!!!" or an indent. Skipping a test that would have said no
(and whose no leaves nothing behind) is the stock loop exactly;
tests/app/notebook/test_render_fast.py parses a corpus both ways. Processors it does not
know (another class) are always asked.

Each processor takes its block with `blocks.pop(0)` (and puts back what it leaves with
`blocks.insert(0, ...)`): on a Python list a copy of every block behind it, so a text of n
blocks cost n² moves. A long text's blocks are kept in a `Blocks`, whose front is the
end of a list.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, MutableSequence

from markdown import Markdown, blockprocessors
from markdown.extensions.admonition import AdmonitionProcessor
from markdown.extensions.footnotes import FootnoteBlockProcessor
from markdown.extensions.sane_lists import SaneOListProcessor, SaneUListProcessor
from markdown.extensions.tables import TableProcessor

from .bounded import SplitQuote
from .callouts import CalloutQuoteProcessor
from .syntax import SpacedHashHeaderProcessor

Rule = Callable[[str], bool]


def _starts_ordered(block: str) -> bool:  # "1. item", up to three spaces in
    return block.lstrip(" ")[:1].isdigit()


def _starts_unordered(block: str) -> bool:  # "- item", "* item", "+ item"
    return block.lstrip(" ")[:1] in ("*", "+", "-")


# name -> (the stock class, what a block must hold for its test to succeed)
_NEEDS: dict[str, tuple[tuple[type, ...], Rule]] = {
    "table": ((TableProcessor,), lambda block: "|" in block),
    "hashheader": ((SpacedHashHeaderProcessor,), lambda block: "#" in block),
    "setextheader": ((blockprocessors.SetextHeaderProcessor,),
                     lambda block: "\n=" in block or "\n-" in block),
    "hr": ((blockprocessors.HRProcessor,),
           lambda block: "-" in block or "*" in block or "_" in block),
    "olist": ((SaneOListProcessor, blockprocessors.OListProcessor), _starts_ordered),
    "ulist": ((SaneUListProcessor, blockprocessors.UListProcessor), _starts_unordered),
    "quote": ((CalloutQuoteProcessor, SplitQuote, blockprocessors.BlockQuoteProcessor),
              lambda block: ">" in block),
    # these two test True and look in run, which puts back a block without a definition
    "footnote": ((FootnoteBlockProcessor,), lambda block: "[^" in block and "]:" in block),
    "reference": ((blockprocessors.ReferenceProcessor,), lambda block: "]:" in block),
}


class Blocks(MutableSequence[str]):
    """A list of blocks stored back to front: taking or putting back the first costs the
    same however many follow. The rest of a list's operations work as on a list."""

    def __init__(self, blocks: Iterable[str]) -> None:
        self._back = list(blocks)[::-1]

    def __len__(self) -> int:
        return len(self._back)

    def _at(self, i: int) -> int:
        n = len(self._back)
        if not -n <= i < n:
            raise IndexError("list index out of range")
        return n - 1 - (i % n)

    def _span(self, key: slice) -> slice | None:
        """Where a contiguous slice's items lie in the stored list; None if not contiguous."""
        n = len(self._back)
        start, stop, step = key.indices(n)
        if step != 1:
            return None
        stop = max(start, stop)
        return slice(n - stop, n - start)

    def __getitem__(self, key):  # type: ignore[override]
        if isinstance(key, slice):
            span = self._span(key)
            if span is None:
                return [self[i] for i in range(*key.indices(len(self)))]
            return self._back[span][::-1]
        return self._back[self._at(key)]

    def __setitem__(self, key, value) -> None:  # type: ignore[override]
        if isinstance(key, slice):  # rare: as a list does it
            items = list(self)
            items[key] = value
            self._back = items[::-1]
        else:
            self._back[self._at(key)] = value

    def __delitem__(self, key) -> None:  # type: ignore[override]
        if isinstance(key, slice) and (span := self._span(key)) is not None:
            del self._back[span]
        elif isinstance(key, slice):
            items = list(self)
            del items[key]
            self._back = items[::-1]
        else:
            del self._back[self._at(key)]

    def __iter__(self) -> Iterator[str]:
        return reversed(self._back)

    def insert(self, index: int, value: str) -> None:
        n = len(self._back)
        if index < 0:
            index = max(0, n + index)
        self._back.insert(n - min(index, n), value)

    def pop(self, index: int = -1) -> str:
        return self._back.pop(self._at(index))

    def __repr__(self) -> str:
        return repr(list(self))


LONG = 64  # blocks: a shorter list is cheap to take from the front of


class SkippingBlockLoop:
    """Stands in for `md.parser.parseBlocks` (the processors call it through the parser)."""

    def __init__(self, md: Markdown):
        self.parser = md.parser
        self._for: list[object] = []
        self._rules: list[tuple[object, Rule | None]] = []

    def install(self) -> None:
        self.parser.parseBlocks = self  # type: ignore[method-assign]

    def _current(self) -> list[tuple[object, Rule | None]]:
        registry = self.parser.blockprocessors
        processors = list(registry)  # by priority, as the stock loop takes them
        if processors != self._for:
            names = [item.name for item in registry._priority]
            self._rules = [(processor, _rule(name, processor))
                           for name, processor in zip(names, processors, strict=True)]
            self._for = processors
        return self._rules

    def __call__(self, parent, blocks: list[str]) -> None:
        rules = self._current()
        todo: MutableSequence[str] = Blocks(blocks) if len(blocks) > LONG else blocks
        while todo:
            block = todo[0]
            for processor, may_match in rules:
                if may_match is not None and not may_match(block):
                    continue
                if processor.test(parent, block):  # type: ignore[attr-defined]
                    if processor.run(parent, todo) is not False:  # type: ignore[attr-defined]
                        # run returns True or None if it succeeds
                        break
                    block = todo[0]  # a run that declines may have put back another
        blocks.clear()  # taken, as the stock loop leaves them


def _admonition(processor: AdmonitionProcessor) -> Rule:
    """An admonition's test: a "!!!" line, or (parse_content) a block indented under the
    admonition just before, or one it is in the middle of (current_sibling)."""
    indent = " " * processor.tab_length
    return lambda block: ("!!!" in block or block.startswith(indent)
                          or processor.current_sibling is not None)


def _rule(name: str, processor: object) -> Rule | None:
    if name == "admonition" and type(processor) is AdmonitionProcessor:
        return _admonition(processor)
    if name in _NEEDS:
        classes, rule = _NEEDS[name]
        if type(processor) in classes:
            return rule
    return None
