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
(tests/app/notebook/test_render_fast.py renders a corpus both ways). Patterns it does not recognise
- another class, another regex - are always tried.

It also takes all of a known pattern's matches in one pass. The stock loop writes the text
out again around every match (text before, placeholder, text after), so a paragraph of n
code spans or links cost n copies of itself: quadratic. Here the text is searched on from
where the last match ended and written out once. The two read the same characters, but
for one: a match that starts right where the last one ended sees, looking back, the
stock loop's placeholder, here the text's own last character. Patterns whose regex looks
back are given back to the stock loop at such a point (`_LOOKS_BACK`); emphasis, which
keeps offsets into the text it was given, is never batched.
"""

from __future__ import annotations

import xml.etree.ElementTree as etree
from collections import deque
from collections.abc import Callable

from markdown import Markdown, inlinepatterns, util
from markdown.treeprocessors import InlineProcessor

from . import links
from .bounded import NumberedFootnotes
from .gfm import STRIKE_RE, URL_RE, BareUrlProcessor, StrikeProcessor
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
    "footnote": (NumberedFootnotes, r"\[\^([^\]]*)\]", ("[^",)),
    # "[text](": getLink needs "(" right after the closing bracket
    "link": (links.Link, _stock("LINK_RE"), ("[", "](")),
    "image_link": (links.Image, _stock("IMAGE_LINK_RE"), ("![", "](")),
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
    "cp_strike": (StrikeProcessor, STRIKE_RE, ("~~",)),
    "cp_url": (BareUrlProcessor, URL_RE, ()),  # "://" or "www.": see _rule
}

# Links to a definition ("[text][id]", "[id]"): without definitions they match nothing.
_REFERENCES: dict[str, tuple[type | None, str]] = {
    "reference": (links.Reference, "["),
    "short_reference": (links.ShortReference, "["),
    "image_reference": (links.ImageReference, "!["),
    "short_image_ref": (links.ShortImageReference, "!["),
}
_DELIMITERS = _stock("DelimiterProcessor")  # "*" and "_" emphasis (Markdown >= 3.11)

# Known patterns whose regex looks back one character before a match, and the characters
# there that change its answer from what it answers after a placeholder (which ends in
# "\x03"): a backslash for a code span (the escaped-backslash match ends in one), "!" for
# a link (a link ends in ")", so never), whitespace or "(" for a tag (a tag ends in a word
# character, so never), a backslash or "$" for math (which ends in "$": math right after
# math goes back to the stock loop).
_LOOKS_BACK: dict[str, Callable[[str], bool]] = {
    "backtick": lambda before: before == "\\",
    "link": lambda before: before == "!",
    "cp_math": lambda before: before in "\\$",
    "cp_tag": lambda before: before.isspace() or before == "(",
}
# (cp_url and cp_strike look back too, but neither can match right where it last ended:
# a URL ends before a space, "<" or punctuation, a strike before a character not "~")


Rule = Callable[[str], bool]

# The one rule that skips a pattern which could match: emphasis pairs its delimiters by
# scanning on from each opener, time quadratic in their number, so a text with more "*"
# and "_" than this (no note a person writes) is left without emphasis, as written.
MAX_DELIMITERS = 10_000


def _all_of(needs: tuple[str, ...]) -> Rule:
    if not needs:  # a URL: a scheme or "www."
        return lambda data: "://" in data or "www." in data
    if len(needs) == 1:
        only = needs[0]
        return lambda data: only in data
    if len(needs) == 2:
        first, second = needs
        return lambda data: first in data and second in data
    return lambda data: all(part in data for part in needs)


def _never(before: str) -> bool:
    return False


def _known(name: str, pattern: object) -> bool:
    """Is this the stock (or our own) pattern of that name, class and regex?"""
    if name in _NEEDS:
        cls, regex, _ = _NEEDS[name]
    elif name in _REFERENCES:
        cls, regex = _REFERENCES[name][0], getattr(pattern, "pattern", None)
        if regex not in (_stock("LINK_RE"), _stock("IMAGE_LINK_RE")):
            return False
    else:
        return False
    return cls is not None and type(pattern) is cls and getattr(pattern, "pattern", None) == regex


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
        return lambda data: 0 < sum(map(data.count, tokens)) <= MAX_DELIMITERS
    return None


class SkippingInlineProcessor(InlineProcessor):
    """InlineProcessor whose per-text loop skips the tries that cannot match."""

    _rules: list[tuple[object, Rule | None]] = []
    _batch: list[Callable[[str], bool] | None] = []  # per pattern: None, or _LOOKS_BACK's
    _for: list[object] = []

    def run(self, tree, ancestors=None):
        patterns = list(self.inlinePatterns)  # by priority, as the stock loop takes them
        if patterns != self._for:  # (rules read per-document state only when asked)
            names = [item.name for item in self.inlinePatterns._priority]
            self._rules = [(pattern, _rule(self.md, name, pattern))
                           for name, pattern in zip(names, patterns, strict=True)]
            self._batch = [_LOOKS_BACK.get(name, _never) if _known(name, pattern) else None
                           for name, pattern in zip(names, patterns, strict=True)]
            self._for = patterns
        return self._walk(tree, ancestors)

    # The stock InlineProcessor.run, its queue of elements a deque: the stock loop takes
    # the first of a list (pop(0), a copy of the rest), time quadratic in the elements a
    # paragraph makes (a note of 60,000 #tags). Otherwise line for line the same.
    def _walk(self, tree, ancestors=None):
        self.stashed_nodes = {}
        tree_parents = [] if ancestors is None else ancestors[:]
        self.parent_map = {c: p for p in tree.iter() for c in p}
        stack = deque([(tree, tree_parents)])
        self._InlineProcessor__build_ancestors(tree, tree_parents)  # type: ignore[attr-defined]
        handle = self._InlineProcessor__handleInline
        placeholders = self._InlineProcessor__processPlaceholders
        while stack:
            element, parents = stack.popleft()
            self.ancestors = parents
            if element is not tree:
                self.ancestors.append(element.tag.lower())
            queued = []
            for child in element:
                if child.text and not isinstance(child.text, util.AtomicString):
                    self.ancestors.append(child.tag.lower())
                    text, child.text = child.text, None
                    found = placeholders(handle(text), child)
                    for item in found:
                        self.parent_map[item[0]] = child
                    stack += found
                    queued.append((child, found))
                    self.ancestors.pop()
                if child.tail:
                    tail = handle(child.tail)
                    dummy = etree.Element("d")
                    child.tail = None
                    after = placeholders(tail, dummy, False)
                    if dummy.tail:
                        child.tail = dummy.tail
                    pos = list(element).index(child) + 1
                    for new in reversed(after):
                        self.parent_map[new[0]] = element
                        element.insert(pos, new[0])
                if len(child):
                    self.parent_map[child] = element
                    stack.append((child, self.ancestors[:]))
            for child, found in queued:
                for i, new in enumerate(found):
                    child.insert(i, new[0])
        return tree

    # Overrides InlineProcessor.__handleInline (name-mangled), which __applyPattern and
    # run call; the loop is the stock one, with the rule asked before a pattern's first try
    # on a text (after a match the text is known to hold one).
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
                start = 0
                continue
            if self._batch[patternIndex] is not None:
                data, start = self._apply_all(pattern, data, patternIndex, start)
                if start is None:  # all done: the next pattern, from the start
                    patternIndex += 1
                    start = 0
                continue
            data, matched, start = apply(pattern, data, patternIndex, start)
            if not matched:
                patternIndex += 1
        return data

    def _apply_all(self, pattern, data: str, index: int, start: int) -> tuple[str, int | None]:
        """Every match of a known pattern from `start` on, as the stock loop would make them
        one call at a time, the text written out once. Returns the text and None; or, where
        a match ends in a character its pattern would see looking back from the next, the
        text with the placeholders so far and where to go on (just after the last one)."""
        for exclude in pattern.ANCESTOR_EXCLUDES:
            if exclude.lower() in self.ancestors:
                return data, None
        regex = pattern.getCompiledRegExp()
        looks_back = self._batch[index]
        pieces: list[str] = []
        done = 0  # data[:done] is in pieces
        while True:
            for m in regex.finditer(data, start):
                node, begin, end = pattern.handleMatch(m, data)
                if begin is not None and end is not None:
                    break
            else:
                break
            start = end
            if node is None:  # a match that leaves the text as it was
                continue
            placeholder = self._stash(node, pattern, index)
            pieces += (data[done:begin], placeholder)
            done = end
            if end < len(data) and looks_back(data[end - 1]):
                pieces.append(data[done:])
                return "".join(pieces), sum(map(len, pieces[:-1]))
        if not pieces:
            return data, None
        pieces.append(data[done:])
        return "".join(pieces), None

    def _stash(self, node, pattern, index: int) -> str:
        """The stock loop's handling of a match's node: its text and its children's
        handled with the patterns after this one, its tail with this one on; a placeholder."""
        if not isinstance(node, str) and not isinstance(node.text, util.AtomicString):
            handle = self._InlineProcessor__handleInline
            for child in [node, *node]:
                if child.text:
                    self.ancestors.append(child.tag.lower())
                    child.text = handle(child.text, index + 1)
                    self.ancestors.pop()
                if child.tail:
                    child.tail = handle(child.tail, index)
        return self._InlineProcessor__stashNode(node, pattern.type())  # type: ignore[attr-defined]

    # Overrides InlineProcessor.__processPlaceholders, the stock loop that puts the stashed
    # nodes back: it adds each piece of text between placeholders to the text or tail it
    # belongs to with +=, a copy of all that came before each time; here the pieces are
    # kept and joined once, when the next node comes or the text ends. What ends up in
    # each text and tail is the same (a lone first piece kept as it is: AtomicString).
    def _InlineProcessor__processPlaceholders(self, data, parent, isText=True):
        result: list = []
        pending: list[str] = []

        def flush() -> None:
            if not pending:
                return
            text = pending[0] if len(pending) == 1 else "".join(pending)
            pending.clear()
            holder, attr = ((result[-1][0], "tail") if result else
                            (parent, "tail") if not isText else (parent, "text"))
            before = getattr(holder, attr)
            setattr(holder, attr, before + text if before else text)

        prefix = self._InlineProcessor__placeholder_prefix  # type: ignore[attr-defined]
        find = self._InlineProcessor__findPlaceholder  # type: ignore[attr-defined]
        element_text = self._InlineProcessor__processElementText  # type: ignore[attr-defined]
        start = 0
        while data:
            index = data.find(prefix, start)
            if index == -1:
                text = data[start:]
                if isinstance(data, util.AtomicString):
                    text = util.AtomicString(text)
                if text:
                    pending.append(text)
                break
            id_, end = find(data, index)
            if id_ not in self.stashed_nodes:  # not one of ours: text
                end = index + len(prefix)
                pending.append(data[start:end])
                start = end
                continue
            node = self.stashed_nodes.get(id_)
            if index > 0 and data[start:index]:
                pending.append(data[start:index])
            if isinstance(node, str):
                if node:
                    pending.append(node)
                start = end
                continue
            for child in [node, *node]:
                if child.tail and child.tail.strip():
                    element_text(node, child, False)
                if child.text and child.text.strip():
                    element_text(child, child)
            start = end
            flush()
            result.append((node, self.ancestors[:]))
        flush()
        return result
