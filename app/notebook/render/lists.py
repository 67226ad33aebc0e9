"""Lists and fenced code as people write them on GitHub and in Obsidian (CommonMark's
rules), read before Python-Markdown's own block parser sees the text.

Python-Markdown nests lists by four spaces, finds a fence only at the start of a line and
only when it is closed, and takes a list item's line after a paragraph for more of the
paragraph. `ListsAndFences` walks the lines once, as CommonMark reads list items: an item's
content starts where its text starts (two spaces in after "- ", three after "1. "), and a
line belongs to the deepest open item whose content column it reaches. It writes each
item's lines again at four spaces per level, which is what Python-Markdown reads, and
takes every fenced code block out (at the top level and in list items) as CommonMark
reads one: up to three spaces in, closed by a fence of the same character at least as
long, or left open to the end of its list item or the note. The code is highlighted as
fenced_code does (through codehilite) and stashed, so the parser sees a placeholder; a
closed block whose info string names an embed (```` ```run ````) is handed to `embed`,
which gives the placeholder that stands for it, wherever the block is. A quote's text goes
through the same pass (bounded.SplitQuote), so lists, fences and embeds in a quote are
read as they are outside one.

Each line is read once and an item's lines are looked up on a stack no deeper than the
line's indentation, so the pass is linear in the text.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from markdown.extensions.codehilite import CodeHilite, CodeHiliteExtension
from markdown.preprocessors import Preprocessor

# an item: up to three spaces, a bullet or a number of up to nine digits with "." or ")",
# then spaces and its text, or nothing
_ITEM_RE = re.compile(
    r"(?P<pad>[ ]{0,3})(?P<marker>[-*+]|(?P<num>\d{1,9})[.)])(?:(?P<gap>[ ]+)(?P<rest>.*))?$")
_RULE_RE = re.compile(r"[ ]{0,3}(?:(?:\*[ \t]*){3,}|(?:-[ \t]*){3,}|(?:_[ \t]*){3,})$")
_FENCE_RE = re.compile(r"(?P<pad>[ ]{0,3})(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
_LANG_RE = re.compile(r"[\w#.+-]+")
# the first line of a top-level block that is not a paragraph: a list item may not
# interrupt it (a quote, table row, heading, admonition, definition, raw HTML, indented
# code, or a stash placeholder)
_NOT_PARAGRAPH_RE = re.compile(r"(?:[-*+]|\d{1,9}[.)])(?:[ \t]|$)|[ ]{0,3}[>|#\[<!]|    |\x02")
# a line that starts a block of its own, so it is never a lazy continuation of a paragraph
_STARTS_BLOCK_RE = re.compile(r"[ ]{0,3}(?:[>#]|```|~~~)")
_LAZY_ITEM_RE = re.compile(r"^(?=[-*+][ ])|(?<=^\d)(?=[.)][ ])|(?<=^\d\d)(?=[.)][ ])")
_LONG_NUMBER_RE = re.compile(r"^(\d{10,})(?=[.)](?:[ ]|$))")
# what a line outside lists must start with to be anything but paragraph text here
_MAY_MARK = frozenset(" -*+_`~>#0123456789")
EMPTY_ITEM = "<!-- -->"  # an empty item's text: Python-Markdown needs some; the sanitizer drops it


def _item(content: str) -> re.Match[str] | None:
    m = _ITEM_RE.match(content)
    if m is None or _RULE_RE.match(content):
        return None
    return m


def _opening_fence(content: str) -> re.Match[str] | None:
    m = _FENCE_RE.match(content)
    if m is None or (m["fence"][0] == "`" and "`" in m["info"]):
        return None  # a backtick fence's info string holds no backtick: a code span
    return m


def _interrupts(item: re.Match[str]) -> bool:
    """Whether an item may start a list right after a paragraph line (CommonMark: a bullet,
    or a number 1, with some text)."""
    return bool(item["rest"] and item["rest"].strip()) and (
        item["num"] is None or int(item["num"]) == 1)


class Fence(NamedTuple):
    """A fenced block as the pass reads it: from `start` to `end` (offsets of the text, its
    closing line included), the info string's first word, its code (less the indentation
    the fence had), the column its lines start at (its list item's content; 0 at the top
    level), and whether a closing fence ended it (else its item or the text did)."""

    start: int
    end: int
    lang: str | None
    code: str
    column: int
    closed: bool


@dataclass
class _List:
    kind: str  # its marker character: "-", "*", "+", "." or ")"
    items: list[int] = field(default_factory=list)  # where its items' lines are in the output
    loose: bool = False  # a blank line between its items, or between blocks in one


class ListsAndFences(Preprocessor):
    """Registered in fenced_code's place (its name and priority), so every fence is read
    by these rules. `spans` holds each fenced block after a run, as a Fence whose start and
    end are line indexes. `embed(name, code)` is the placeholder for a block whose info
    string names an embed, or None for code."""

    def __init__(self, md=None, embed: Callable[[str, str], str | None] | None = None):
        super().__init__(md)
        self.embed = embed

    def run(self, lines: list[str]) -> list[str]:
        self.out: list[str] = []
        self.spans: list[Fence] = []
        self.shown: dict[tuple[str, str | None], str] = {}  # a block written twice: once
        self.lines = lines
        stack: list[int] = []  # the content column of each open item, outermost first
        prev = "blank"  # what the last line was: blank, para (paragraph text) or other
        first = ""  # the first line of the current top-level block
        lists: list[_List] = []  # the open list at each depth
        self.blank_before: set[int] = set()  # item lines a loose list puts a blank line before
        loose_tail = False  # an item's text went on after a blank line
        i = 0
        while i < len(lines):
            line = lines[i]
            i += 1
            if not line.strip():
                self.out.append("")
                if prev == "empty item":  # an item holds at most one blank line before its text
                    stack.pop()
                prev, first = "blank", ""
                continue
            if not stack and line[0] not in _MAY_MARK:  # paragraph text, most lines
                self.out.append(line)
                prev, first = "para", first or line
                continue
            after_blank = prev == "blank"
            indent = len(line) - len(line.lstrip(" "))
            k = 0
            while k < len(stack) and indent >= stack[k]:
                k += 1
            base = stack[k - 1] if k else 0
            content = line[base:]
            item = _item(content)
            if item and not stack and prev == "para" and (
                    not _interrupts(item) or _NOT_PARAGRAPH_RE.match(first) or "|" in first):
                item = None  # more of the paragraph, as CommonMark reads it
            fence = None if item else _opening_fence(content)
            if (k < len(stack) and item is None and fence is None and prev == "para"
                    and not _STARTS_BLOCK_RE.match(line) and not _RULE_RE.match(line)):
                # a lazy continuation line: more of the deepest item's paragraph (and
                # not an item of its own, as Python-Markdown would read it there)
                text = _LAZY_ITEM_RE.sub(r"\\", line.lstrip(" "), count=1)
                self.out.append(" " * 4 * len(stack) + text)
                continue
            in_list = bool(stack)
            del stack[k:]
            if not stack and not first:
                first = line
            depth = len(stack)
            if item:
                text, column = self._item_text(item, base)
                kind = item["marker"][-1]
                self._close(lists, depth + 1)
                same = len(lists) > depth and lists[depth].kind == kind
                if not in_list and prev == "para":
                    self.out.append("")  # the blank line Python-Markdown needs before a list
                elif not stack and in_list and not same:
                    self.out.extend(("", EMPTY_ITEM, ""))  # another marker: another list
                elif loose_tail:
                    self.out.append("")  # or the item is read as more of the last paragraph
                if same:
                    lists[depth].loose |= after_blank
                else:
                    self._close(lists, depth)
                    lists.append(_List(kind))
                lists[depth].items.append(len(self.out))
                loose_tail = False
                stack.append(column)
                marker = f"{int(item['num'])}." if item["num"] else item["marker"]
                inner = _opening_fence(text) if text != EMPTY_ITEM else None
                if inner:
                    i, text = self._fence(inner, i, stack)
                self.out.append(" " * 4 * depth + marker + " " + text)
                prev = "other" if inner else "empty item" if text == EMPTY_ITEM else "para"
                continue
            self._close(lists, depth)
            if after_blank and depth:
                lists[depth - 1].loose = True
            if fence:
                i, placeholder = self._fence(fence, i, stack)
                if stack:
                    self.out.append(" " * 4 * len(stack) + placeholder)
                else:
                    self.out.extend(("", placeholder, ""))
                prev = "other"
                continue
            if stack and self.out and not self.out[-1]:
                loose_tail = True
            content = _LONG_NUMBER_RE.sub(r"\1\\", content, count=1)  # not an item: too long
            self.out.append(" " * 4 * len(stack) + content)
            prev = "other" if _STARTS_BLOCK_RE.match(content) or _RULE_RE.match(content) \
                else "para"
        self._close(lists, 0)
        if not self.blank_before:
            return self.out
        out: list[str] = []
        for index, line in enumerate(self.out):
            if index in self.blank_before and out and out[-1]:
                out.append("")
            out.append(line)
        return out

    def _close(self, lists: list[_List], depth: int) -> None:
        """Ends the lists at `depth` and deeper: a loose one has a blank line before each
        item, so Python-Markdown makes every item of it a paragraph (not only some)."""
        for closed in lists[depth:]:
            if closed.loose:
                self.blank_before.update(closed.items[1:])
        del lists[depth:]

    @staticmethod
    def _item_text(item: re.Match[str], base: int) -> tuple[str, int]:
        """An item's first line's text, and the column its content starts at."""
        start = base + len(item["pad"]) + len(item["marker"])
        gap, rest = item["gap"] or "", item["rest"] or ""
        if not rest.strip():
            return EMPTY_ITEM, start + 1
        if len(gap) > 4:  # the text is indented code: the content starts one space in
            return " " * (len(gap) - 1) + rest, start + 1
        return rest, start + len(gap)

    def _fence(self, opening: re.Match[str], i: int, stack: list[int]) -> tuple[int, str]:
        """Takes a fenced block whose opening line is read (its lines from `i` on); returns
        the index of the first line after it and the placeholder that stands for it."""
        start = i - 1
        base = stack[-1] if stack else 0
        fence, pad = opening["fence"], len(opening["pad"])
        closing = re.compile(rf"[ ]{{0,3}}{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        code: list[str] = []
        lines = self.lines
        closed = False
        while i < len(lines):
            line = lines[i]
            if line.strip():
                indent = len(line) - len(line.lstrip(" "))
                if indent < base:
                    break  # the item ends, and the block with it
                content = line[base:]
                if closing.match(content):
                    i, closed = i + 1, True
                    break
                strip = min(pad, len(content) - len(content.lstrip(" ")))
                code.append(content[strip:])
            else:
                code.append(line[base + pad:])
            i += 1
        while not closed and code and not code[-1].strip():
            code.pop()  # the blank lines an open block ends on are not its code
            i -= 1
        words = opening["info"].split()
        lang = words[0] if words and _LANG_RE.fullmatch(words[0]) else None
        block = ("\n".join(code), lang)
        self.spans.append(Fence(start, i, lang, block[0], base, closed))
        if self.md is None:
            return i, ""
        if lang and closed and self.embed is not None:  # never closed: still being written
            placeholder = self.embed(lang, block[0] + "\n")
            if placeholder is not None:
                return i, placeholder
        if block not in self.shown:
            self.shown[block] = self._highlight(*block)
        return i, self.md.htmlStash.store(self.shown[block])

    def _highlight(self, code: str, lang: str | None) -> str:
        config = next(ext.getConfigs() for ext in self.md.registeredExtensions
                      if isinstance(ext, CodeHiliteExtension))
        config = dict(config)
        style = config.pop("pygments_style", "default")
        if not code:  # highlighting would give it a line
            return f'<div class="{config["css_class"]}"><pre><code></code></pre></div>'
        return CodeHilite(code + "\n", lang=lang, style=style, **config).hilite(shebang=False)


def fenced_blocks(text: str) -> list[Fence]:
    """The text's fenced blocks at the top level and in list items, in order."""
    lines = text.split("\n")
    finder = ListsAndFences(None)
    finder.run(lines)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line) + 1)
    return [fence._replace(start=starts[fence.start], end=min(starts[fence.end], len(text)))
            for fence in finder.spans]
