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
"""

from __future__ import annotations

from collections.abc import Callable

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
        while blocks:
            for processor, may_match in rules:
                if may_match is not None and not may_match(blocks[0]):
                    continue
                if processor.test(parent, blocks[0]):  # type: ignore[attr-defined]
                    if processor.run(parent, blocks) is not False:  # type: ignore[attr-defined]
                        # run returns True or None if it succeeds
                        break


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
