"""Obsidian's markdown, as one Python-Markdown extension: wiki links in all their forms
and embeds (wikilinks.py), callouts (callouts.py), math (math.py), `%%comments%%`
(prose.py), `==highlights==` (pymdownx.mark, in the pipeline's list) and block ids:

    A paragraph or list item that ends in " ^my-block" gets id="b-my-block" (the marker
    is not shown), so `[[Note#^my-block]]` lands on it. A "^my-block" line of its own
    names the block just before it.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as etree

from markdown import Markdown
from markdown.extensions import Extension
from markdown.treeprocessors import Treeprocessor

from .anchors import block_anchor
from .callouts import CalloutQuoteProcessor, CalloutTreeprocessor
from .math import DisplayMathPreprocessor, MathInlineProcessor
from .prose import CommentPreprocessor
from .syntax import CommonplaceExtension
from .wikilinks import EmbedProcessor, WikiLinkProcessor

_BLOCK_ID_RE = re.compile(r"[A-Za-z0-9-]{1,64}")
_LONE_MARK_RE = re.compile(r"^\s*\^([A-Za-z0-9-]{1,64})\s*$")
# What a block id may name: the tags the sanitizer lets carry one.
_NAMEABLE = {"p", "li", "ul", "ol", "blockquote", "table"}
_BLOCKS_IN_ITEM = {"p", "ul", "ol", "blockquote", "div", "pre", "table", "details"}


def _take_mark(text: str | None) -> tuple[str | None, str | None]:
    """(text less a trailing " ^id", id), or (text, None). By hand, not a regex search:
    a search for "spaces, then ^id, at the end" retries at every space of a long run."""
    if not text or "^" not in text:
        return text, None
    at = text.rfind("^")
    block_id = text[at + 1 :].rstrip(" \t")
    if not _BLOCK_ID_RE.fullmatch(block_id) or (at and text[at - 1] not in " \t"):
        return text, None
    return text[:at].rstrip(" \t"), block_id


class BlockIdTreeprocessor(Treeprocessor):
    """After inline markdown: ids for blocks that end in a `^block` mark."""

    def run(self, root: etree.Element) -> None:
        for parent in list(root.iter()):
            previous = None
            for child in list(parent):
                if child.tag == "p" and not len(child) and previous is not None:
                    lone = _LONE_MARK_RE.match(child.text or "")
                    if lone and previous.tag in _NAMEABLE and "id" not in previous.attrib:
                        previous.set("id", block_anchor(lone[1]))
                        parent.remove(child)
                        continue
                if child.tag in ("p", "li") and "id" not in child.attrib:
                    self._mark(child)
                previous = child

    @staticmethod
    def _mark(block: etree.Element) -> None:
        """The mark is in the last text before the block's first nested block."""
        children = list(block)
        stop = next((i for i, c in enumerate(children) if c.tag in _BLOCKS_IN_ITEM),
                    len(children))
        holder = children[stop - 1] if stop else None
        text, found = _take_mark(holder.tail if holder is not None else block.text)
        if found is None:
            return
        if holder is not None:
            holder.tail = text
        else:
            block.text = text
        block.set("id", block_anchor(found))


class ObsidianExtension(Extension):
    """Registered beside CommonplaceExtension, whose `state` (the current render's) its
    processors read."""

    def __init__(self, ext: CommonplaceExtension):
        super().__init__()
        self.ext = ext

    def extendMarkdown(self, md: Markdown) -> None:
        # after fenced_code (25) has stashed code blocks; comments before math, so a
        # formula in a comment is gone with it
        md.preprocessors.register(CommentPreprocessor(md), "cp_comments", 24)
        md.preprocessors.register(DisplayMathPreprocessor(md), "cp_display_math", 23)
        md.parser.blockprocessors.register(CalloutQuoteProcessor(md.parser), "quote", 20)
        # after code spans (190), before escapes (180) and emphasis: LaTeX is full of
        # backslashes, underscores and stars
        md.inlinePatterns.register(MathInlineProcessor(md), "cp_math", 185)
        # wiki links after markdown links (160), so "[see [[X]]](url)" stays one link
        # whose text is literal ("[[X]]" itself can never be a defined reference link);
        # embeds just before wiki links, which would take "[[x]]" out of "![[x]]"
        md.inlinePatterns.register(EmbedProcessor(self.ext, md), "cp_embed", 156)
        md.inlinePatterns.register(WikiLinkProcessor(self.ext, md), "cp_wikilink", 155)
        # after the block parser, before inline markdown (20) reads the title
        md.treeprocessors.register(CalloutTreeprocessor(md), "cp_callouts", 22)
        md.treeprocessors.register(BlockIdTreeprocessor(md), "cp_block_ids", 19)
