"""Lists as people write them on GitHub and in Obsidian, where Python-Markdown differs.

A list may start right after a paragraph's last line, with no blank line between (as
CommonMark: a bullet, or an ordered list that starts at 1, interrupts a paragraph).
Python-Markdown reads such a line as more of the paragraph; `ListAfterParagraph` puts the
blank line in, at the top level, where the block so far is a paragraph.
"""

from __future__ import annotations

import re

from markdown.preprocessors import Preprocessor

# an item that may interrupt a paragraph: a bullet or "1." / "1)", then text
_INTERRUPTS_RE = re.compile(r"(?:[-*+]|1[.)])[ \t]+\S")
# the first line of a block that is not a paragraph's: a list item, quote, table row,
# heading, admonition, definition, raw HTML, indented code, or a stash placeholder
_NOT_PARAGRAPH_RE = re.compile(r"(?:[-*+]|\d{1,9}[.)])(?:[ \t]|$)|[ ]{0,3}[>|#\[<!]|    |\x02")
_RULE_RE = re.compile(r"[ ]{0,3}(?:(?:\*[ ]*){3,}|(?:-[ ]*){3,}|(?:_[ ]*){3,})$")


class ListAfterParagraph(Preprocessor):
    def run(self, lines: list[str]) -> list[str]:
        out: list[str] = []
        first = ""  # the current block's first line; "" between blocks
        for line in lines:
            if not line:
                first = ""
            elif not first:
                first = line
            elif (_INTERRUPTS_RE.match(line) and not _RULE_RE.match(line)
                  and not _NOT_PARAGRAPH_RE.match(first) and "|" not in first):
                out.append("")
                first = line
            out.append(line)
        return out
