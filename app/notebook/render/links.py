"""Python-Markdown's link and image patterns, less two scans to the end of the text.

For each "[" the stock patterns find the link text's closing "]" by counting brackets
from there on, to the end of the text if it has none; and a link's "(" the same way for
its ")". A text of n "[" cost n scans of itself. Here the closing bracket of every "["
is found in one pass over the text (kept while the text is the same string), and a "("
with no ")" or quote after it is no link at once (the stock scan could only end there
without one). What each returns is the stock's, but for the text of a link that is not
one, which no caller reads.
"""

from __future__ import annotations

import re

from markdown import Markdown, inlinepatterns

_BRACKET_RE = re.compile(r"[\[\]]")


class _Brackets:
    """Where each "[" of one text closes (only those that do)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.closes: dict[int, int] = {}
        opened: list[int] = []
        for m in _BRACKET_RE.finditer(text):
            if m.group() == "[":
                opened.append(m.start())
            elif opened:
                self.closes[opened.pop()] = m.start()
        # last ")" and last quote: a link's "(" after both can never close
        self.last_close = max(text.rfind(")"), text.rfind("'"), text.rfind('"'))


class _Bounded(inlinepatterns.LinkInlineProcessor):
    _brackets = _Brackets("")

    def _of(self, data: str) -> _Brackets:
        if self._brackets.text is not data:
            self._brackets = _Brackets(data)
        return self._brackets

    def getText(self, data: str, index: int) -> tuple[str, int, bool]:
        # called just past a "[" (every pattern here ends its regex with one)
        close = self._of(data).closes.get(index - 1) if data[index - 1:index] == "[" else None
        if close is None:
            return "", len(data), False
        return data[index:close], close + 1, True

    def getLink(self, data: str, index: int) -> tuple[str, str | None, int, bool]:
        if index > self._of(data).last_close:  # where the stock scan would have ended
            return "", None, len(data) if data[index:index + 1] == "(" else index, False
        return super().getLink(data, index)


class Link(_Bounded, inlinepatterns.LinkInlineProcessor):
    pass


class Image(_Bounded, inlinepatterns.ImageInlineProcessor):
    pass


class Reference(_Bounded, inlinepatterns.ReferenceInlineProcessor):
    pass


class ShortReference(_Bounded, inlinepatterns.ShortReferenceInlineProcessor):
    pass


class ImageReference(_Bounded, inlinepatterns.ImageReferenceInlineProcessor):
    pass


class ShortImageReference(_Bounded, inlinepatterns.ShortImageReferenceInlineProcessor):
    pass


# the stock pattern's name -> ours (and the stock class, which ours extends)
BOUNDED = {"link": Link, "image_link": Image, "reference": Reference,
           "short_reference": ShortReference, "image_reference": ImageReference,
           "short_image_ref": ShortImageReference}
STOCK = {name: ours.__bases__[1] for name, ours in BOUNDED.items()}


def install(md: Markdown) -> None:
    """Ours in place of the stock ones: same name, regex and place."""
    for item in list(md.inlinePatterns._priority):
        if item.name in BOUNDED:
            stock = md.inlinePatterns[item.name]
            md.inlinePatterns.register(BOUNDED[item.name](stock.pattern, md), item.name,
                                       item.priority)
