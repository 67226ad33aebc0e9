"""Obsidian's text-level syntax that must go before the block parser reads the note:
`%%comments%%` (gone entirely: not in the page, not in the search text), and the helper
that keeps such rewriting out of fenced code."""

from __future__ import annotations

import re
from collections.abc import Callable

from markdown.preprocessors import Preprocessor

# A fence line: spaces and any quote or list marks before ``` or ~~~ (each repeat takes a
# mark, so a line of spaces is read once, not in every way of splitting it).
_FENCE_RE = re.compile(r"^[ \t]*(?:(?:>|[-*+]|\d{1,9}[.)])[ \t]*)*(`{3,}|~{3,})")
# Code spans are kept as they are; a span does not run across a blank line.
_COMMENT_RE = re.compile(r"(`+)(?:(?!\n[ \t]*\n).)*?(?<!`)\1(?!`)|%%.*?%%", re.S)


def outside_fences(text: str, rewrite: Callable[[str], str]) -> str:
    """`text` with `rewrite` applied to each run of lines outside fenced code blocks.
    Python-Markdown's fenced_code has stashed its blocks by the time the preprocessors
    here run; this holds for fences it leaves in place (inside lists, for one)."""
    out: list[str] = []
    prose: list[str] = []
    fence: str | None = None
    for line in text.split("\n"):
        m = _FENCE_RE.match(line)
        if fence is None and m is None:
            prose.append(line)
            continue
        if fence is None:
            out.append(rewrite("\n".join(prose)) if prose else None)
            prose = []
            fence = m[1]
        elif m is not None and m[1][0] == fence[0] and len(m[1]) >= len(fence) and (
                not line[m.end():].strip()):
            fence = None
        out.append(line)
    if prose:
        out.append(rewrite("\n".join(prose)))
    return "\n".join(part for part in out if part is not None)


def strip_comments(text: str) -> str:
    return _COMMENT_RE.sub(lambda m: m[0] if m[1] else "", text)


class CommentPreprocessor(Preprocessor):
    """`%%…%%`, inline or over many lines, removed. An unclosed `%%` stays as written."""

    def run(self, lines: list[str]) -> list[str]:
        text = "\n".join(lines)
        if "%%" not in text:
            return lines
        return outside_fences(text, strip_comments).split("\n")
