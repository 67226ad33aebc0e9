"""Python-Markdown's inline processor, less the pattern tries that cannot match.

The stock processor tries every inline pattern (17 here) on every run of text, in
priority order, each try a Python call and a regex scan; a paragraph of prose with a
few [[wiki links]] pays for backticks, images, autolinks, entities... and for the link
and reference patterns, which parse every "[[" bracket by bracket before giving up. That
was half of a render.

This subclass skips a pattern on a text only where that pattern provably finds nothing
there: a character its match must contain is absent (no "`", no backtick pattern), a link
has no "](" to end in, or a reference link has no reference definition to point at (the
stock processor matches, finds no definition and leaves the text as it was). A skipped
try is exactly a try that returns "no match", so the HTML is the stock processor's
(tests/test_render_fast.py renders a corpus both ways). Patterns it does not recognise
- another class, another regex - are always tried.
"""

from __future__ import annotations

from collections.abc import Callable

from markdown import Markdown, inlinepatterns, util
from markdown.extensions.footnotes import FootnoteInlineProcessor
from markdown.treeprocessors import InlineProcessor

from .math import MATH_RE, MathInlineProcessor
from .syntax import TAG_RE, TagProcessor
from .wikilinks import EMBED_RE, WIKILINK_RE, EmbedProcessor, WikiLinkProcessor


def _stock(name: str):
    """A name of markdown.inlinepatterns, or None where this Markdown has no such thing
    (pyproject allows Markdown >= 3.5); a pattern of no known class is always tried."""
    return getattr(inlinepatterns, name, None)


# (class, its regex, the substrings every match needs in the text); None: not in this
# Markdown, the pattern is always tried.
_NEEDS: dict[str, tuple[type | None, str | None, tuple[str, ...]]] = {
    "backtick": (_stock("BacktickInlineProcessor"), _stock("BACKTICK_RE"), ("`",)),
    "escape": (_stock("EscapeInlineProcessor"), _stock("ESCAPE_RE"), ("\\",)),
    "footnote": (FootnoteInlineProcessor, r"\[\^([^\]]*)\]", ("[^",)),
    # "[text](": getLink needs "(" right after the closing bracket
    "link": (_stock("LinkInlineProcessor"), _stock("LINK_RE"), ("[", "](")),
    "image_link": (_stock("ImageInlineProcessor"), _stock("IMAGE_LINK_RE"), ("![", "](")),
    "autolink": (_stock("AutolinkInlineProcessor"), _stock("AUTOLINK_RE"), ("<",)),
    "automail": (_stock("AutomailInlineProcessor"), _stock("AUTOMAIL_RE"), ("<",)),
    "linebreak": (_stock("SubstituteTagInlineProcessor"), _stock("LINE_BREAK_RE"),
                  ("  \n",)),
    "html": (_stock("HtmlInlineProcessor"), _stock("HTML_RE"), ("<",)),
    "entity": (_stock("HtmlInlineProcessor"), _stock("ENTITY_RE"), ("&", ";")),
    "cp_wikilink": (WikiLinkProcessor, WIKILINK_RE, ("[[", "]]")),
    "cp_embed": (EmbedProcessor, EMBED_RE, ("![[", "]]")),
    "cp_math": (MathInlineProcessor, MATH_RE, ("$",)),
    "cp_tag": (TagProcessor, TAG_RE, ("#",)),
}

# Links to a definition ("[text][id]", "[id]"): without definitions they match nothing.
_REFERENCES: dict[str, tuple[type | None, str]] = {
    "reference": (_stock("ReferenceInlineProcessor"), "["),
    "short_reference": (_stock("ShortReferenceInlineProcessor"), "["),
    "image_reference": (_stock("ImageReferenceInlineProcessor"), "!["),
    "short_image_ref": (_stock("ShortImageReferenceInlineProcessor"), "!["),
}
_DELIMITERS = _stock("DelimiterProcessor")  # "*" and "_" emphasis (Markdown >= 3.11)


Rule = Callable[[str], bool]


def _all_of(needs: tuple[str, ...]) -> Rule:
    if len(needs) == 1:
        only = needs[0]
        return lambda data: only in data
    if len(needs) == 2:
        first, second = needs
        return lambda data: first in data and second in data
    return lambda data: all(part in data for part in needs)


def _rule(md: Markdown, name: str, pattern: object) -> Rule | None:
    """When `pattern` may match a text; None: it may always match."""
    kind = type(pattern)
    if name in _NEEDS:
        cls, regex, needs = _NEEDS[name]
        if cls is not None and kind is cls and regex is not None and (
                getattr(pattern, "pattern", None) == regex):
            return _all_of(needs)
        return None
    if name in _REFERENCES:
        cls, opener = _REFERENCES[name]
        if cls is not None and kind is cls and getattr(pattern, "pattern", None) in (
                _stock("LINK_RE"), _stock("IMAGE_LINK_RE")):
            return lambda data: bool(md.references) and opener in data
        return None
    if _DELIMITERS is not None and kind is _DELIMITERS:  # emphasis: any of its tokens
        tokens = tuple(pattern.tokens)  # type: ignore[attr-defined]
        if len(tokens) == 2:
            one, other = tokens
            return lambda data: one in data or other in data
        return lambda data: any(token in data for token in tokens)
    return None


class SkippingInlineProcessor(InlineProcessor):
    """InlineProcessor whose per-text loop skips the tries that cannot match."""

    _rules: list[tuple[object, Rule | None]] = []
    _for: list[object] = []

    def run(self, tree, ancestors=None):
        patterns = list(self.inlinePatterns)  # by priority, as the stock loop takes them
        if patterns != self._for:  # (rules read per-document state only when asked)
            names = [item.name for item in self.inlinePatterns._priority]
            self._rules = [(pattern, _rule(self.md, name, pattern))
                           for name, pattern in zip(names, patterns, strict=True)]
            self._for = patterns
        return super().run(tree, ancestors)

    # Overrides InlineProcessor.__handleInline (name-mangled), which __applyPattern and
    # run call; the loop is the stock one, with the rule asked before a pattern's first try
    # on a text (after a match the text is known to hold one), and patterns marked BATCH
    # applied to all their matches at once.
    def _InlineProcessor__handleInline(self, data: str, patternIndex: int = 0) -> str:
        if isinstance(data, util.AtomicString):
            return data
        rules = self._rules
        apply = self._InlineProcessor__applyPattern  # type: ignore[attr-defined]
        start = 0
        count = len(rules)
        while patternIndex < count:
            pattern, may_match = rules[patternIndex]
            if start == 0 and may_match is not None and not may_match(data):
                patternIndex += 1
                continue
            if getattr(pattern, "BATCH", False):
                data = self._apply_all(pattern, data, start)
                patternIndex += 1
                start = 0
                continue
            data, matched, start = apply(pattern, data, patternIndex, start)
            if not matched:
                patternIndex += 1
        return data

    def _apply_all(self, pattern, data: str, start: int) -> str:
        """What the stock loop makes of `data` with `pattern`, try after try, in one pass.
        Only for patterns whose nodes hold no markdown (atomic text, or none) and whose
        matches end where their nodes do, so no try depends on what an earlier one did; the
        stock loop rebuilds the whole text after every match, quadratic in their number."""
        for exclude in pattern.ANCESTOR_EXCLUDES:
            if exclude.lower() in self.ancestors:
                return data
        stash = self._InlineProcessor__stashNode  # type: ignore[attr-defined]
        parts: list[str] = []
        at = 0
        for m in pattern.getCompiledRegExp().finditer(data, start):
            node, begin, end = pattern.handleMatch(m, data)
            if begin is None or end is None or node is None:
                continue
            parts.append(data[at:begin])
            parts.append(stash(node, pattern.type()))
            at = end
        if not parts:
            return data
        parts.append(data[at:])
        return "".join(parts)
