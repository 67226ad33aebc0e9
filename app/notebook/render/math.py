"""Math as Obsidian writes it, rendered to MathML on the server (no script on the page:
Chromium and Firefox draw MathML Core themselves).

- `$…$` inline: no space after the opening `$`, none before the closing one, and no digit
  right after it, so "$5 and $6" stays prices.
- `$$…$$` display, on lines of its own (several lines, blank ones too) or inside a line.
- `\\$` is a dollar sign.

A formula latex2mathml cannot read stays as written. The MathML goes into the page as raw
HTML, so the sanitizer decides what of it stays (sanitize.MATHML).
"""

from __future__ import annotations

import logging
import re

from latex2mathml.converter import convert
from markdown import Markdown
from markdown.inlinepatterns import InlineProcessor
from markdown.preprocessors import Preprocessor

from .prose import outside_fences

log = logging.getLogger(__name__)

MAX_FORMULA = 4000  # characters of LaTeX; a longer one stays as written

MATH_RE = (
    r"(?<![\\$])\$\$(?!\$)(.+?)(?<!\\)\$\$"  # display
    r"|(?<![\\$])\$(?![\s$])((?:\\.|[^\\$])+?)(?<![\s\\])\$(?![$\d])"  # inline
)
_DISPLAY_OPEN_RE = re.compile(r"[ \t]{0,3}\$\$")


def mathml(latex: str, display: bool) -> str | None:
    if len(latex) > MAX_FORMULA or not latex.strip():
        return None
    try:
        return convert(latex.strip(), display="block" if display else "inline")
    except Exception:  # a library's parser on user text: any failure leaves the text
        log.debug("not math: %r", latex, exc_info=True)
        return None


class DisplayMathPreprocessor(Preprocessor):
    """`$$` blocks on lines of their own, before the block parser can read their lines as
    lists, headings or paragraphs."""

    def run(self, lines: list[str]) -> list[str]:
        text = "\n".join(lines)
        if "$$" not in text:
            return lines
        return outside_fences(text, self._replace).split("\n")

    def _replace(self, prose: str) -> str:
        """Each line that opens with `$$`, to the first line (it or a later one) that ends
        with `$$`. Found line by line, with where the next closing line is worked out
        once: a note of many lines opening with "$$" and none closing stays linear."""
        lines = prose.split("\n")
        closes: list[int | None] = [None] * (len(lines) + 1)
        for i in range(len(lines) - 1, -1, -1):
            closes[i] = i if lines[i].rstrip(" \t").endswith("$$") else closes[i + 1]
        out: list[str] = []
        i = 0
        while i < len(lines):
            opened = _DISPLAY_OPEN_RE.match(lines[i])
            first = lines[i][opened.end() :] if opened else ""
            end = (i if first.rstrip(" \t").endswith("$$") and len(first.strip()) > 2
                   else closes[i + 1]) if opened else None
            if end is None:
                out.append(lines[i])
                i += 1
                continue
            body = "\n".join([first, *lines[i + 1 : end + 1]]) if end > i else first
            html = mathml(body.rstrip(" \t")[:-2], display=True)
            if html is None:
                out.append(lines[i])
                i += 1
                continue
            out.append("\n" + self.md.htmlStash.store(html) + "\n")
            i = end + 1
        return "\n".join(out)


class MathInlineProcessor(InlineProcessor):
    def __init__(self, md: Markdown):
        super().__init__(MATH_RE, md)  # compiled with DOTALL: display math spans lines

    def handleMatch(self, m: re.Match[str], data: str):  # type: ignore[override]
        display = m.group(1) is not None
        html = mathml(m.group(1) if display else m.group(2), display)
        if html is None:
            return None, None, None
        return self.md.htmlStash.store(html), m.start(0), m.end(0)
