"""GitHub's inline extensions to CommonMark: `~~strikethrough~~` and bare URLs as links
(`https://…`, `http://…`, `www.…`).

pymdownx.tilde and pymdownx.magiclink do the same, but their patterns are not among
those inline_skip.py takes in one pass, and they were quadratic on a note full of them
(docs/MARKDOWN.md). These patterns are: each match's scan ends at the next "~~" or the
next space, so the scans of all tries together read the text a bounded number of times.
"""

from __future__ import annotations

import xml.etree.ElementTree as etree

from markdown import Markdown
from markdown.inlinepatterns import InlineProcessor
from markdown.util import AtomicString

# "~~text~~": text that neither starts nor ends with a space, on one line, holding no "~~"
STRIKE_RE = r"~~(?![\s~])((?:[^~\n]|~(?!~))+?)(?<![\s~])~~(?!~)"
# a URL not inside a word or another URL: its scheme or "www.", then up to the next space
# or "<" (the punctuation it ends on is the sentence's: _url_end)
URL_RE = r"(?<![\w/.@:~+-])(?:https?://|www\.)[^\s<]*"
_TRAILING = frozenset("?!.,:;*_~'\"]")


def _url_end(text: str, start: int, end: int) -> int:
    """Where a bare URL ends (GitHub's rule): not on punctuation, and on a closing
    parenthesis only where it closes one opened in the URL ("(see https://x.test/a_(b))")."""
    unclosed = text.count(")", start, end) - text.count("(", start, end)
    while end > start:
        last = text[end - 1]
        if last in _TRAILING:
            end -= 1
        elif last == ")" and unclosed > 0:
            end, unclosed = end - 1, unclosed - 1
        else:
            break
    return end


class StrikeProcessor(InlineProcessor):
    def handleMatch(self, m, data):  # noqa: N802 - Python-Markdown's name
        el = etree.Element("del")
        el.text = m.group(1)
        return el, m.start(0), m.end(0)


class BareUrlProcessor(InlineProcessor):
    """A URL in running text as a link to itself; "www.…" to http://www.…"""

    ANCESTOR_EXCLUDES = ("a",)

    def handleMatch(self, m, data):  # noqa: N802 - Python-Markdown's name
        end = _url_end(data, m.start(0), m.end(0))
        text = data[m.start(0):end]
        if text.rstrip("/") in ("http:", "https:", "www."):
            return None, None, None
        el = etree.Element("a")
        el.set("href", text if "://" in text else "http://" + text)
        el.text = AtomicString(text)
        return el, m.start(0), end


def install(md: Markdown) -> None:
    # after raw HTML (90) and links (160), whose URLs are taken by then; before tags (85),
    # so a "#" in a URL stays in it
    md.inlinePatterns.register(BareUrlProcessor(URL_RE, md), "cp_url", 88)
    # after code spans and links; before emphasis (60), so "~~*a*~~" is both
    md.inlinePatterns.register(StrikeProcessor(STRIKE_RE, md), "cp_strike", 65)
