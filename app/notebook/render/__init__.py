"""The one markdown pipeline: markdown → HTML → nh3 sanitizer → trusted embeds.

Everything that turns a note's markdown into HTML goes through `render`; nothing else
in the app should call Python-Markdown or a sanitizer directly.

Python-Markdown, its extensions, nh3 and Pygments load on the first render (or the first
request for the code stylesheet), not with this package: a web worker that only serves
pages (stored HTML) never needs them, and they were ~4 MB of each worker's memory
(bench/idle.py). The one place in the server where an import waits inside a function.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .rendered import Rendered, Resolved, WikiLink, hide_draft_links

if TYPE_CHECKING:
    from collections.abc import Callable

    from .lists import Fence

# Raised whenever a change here alters the HTML a note renders to: entries store their HTML
# at save time, and `commonplace up` / `db upgrade` render every stored note again once
# when this moves (app/notebook/rerender.py). 2: task boxes carry their number.
# 3: links to drafts are marked (hidden from readers who may not see drafts).
# 4: run cards carry charts, lessons and a part the feed shows as an image.
# 5: Obsidian's markdown (heading and block links, embeds, callouts, highlights, comments, math).
# 6: a list right after a paragraph's last line is a list; fences in list items and quotes.
# 7: lists nest as CommonMark nests them (two spaces will do); fences as CommonMark reads
# them; strikethrough and bare URLs. 8: embed fences in list items and quotes; lists in
# quotes as at the top level.
VERSION = 8


def render(body_md: str, **options) -> Rendered:
    """A note's markdown as sanitized HTML, with its links, tags and text (pipeline.render,
    which documents the options)."""
    from .pipeline import render as rendering

    return rendering(body_md, **options)


def pygments_css() -> str:
    """The code blocks' stylesheet, light and dark (highlight.pygments_css)."""
    from .highlight import pygments_css as stylesheet

    return stylesheet()


def excerpt(html: str, fragment: str | None) -> str | None:
    """The part of a note's stored HTML that a link's fragment names ("Heading", "^block"),
    for `embed_note` (transclusion.excerpt)."""
    from .transclusion import excerpt as part

    return part(html, fragment)


def flatten_embeds(html: str, keep: Callable[[str], bool]) -> str:
    """Stored HTML with each embedded note that `keep` refuses (given the HTML of its
    source line, the link to it) reduced to that line (transclusion.flatten)."""
    from .transclusion import flatten

    return flatten(html, keep)


def fenced_blocks(text: str) -> list[Fence]:
    """The text's fenced blocks (code, and embeds such as ```` ```run ````) at the top level
    and in list items, by the grammar the pipeline reads them with (lists.Fence: where
    each lies, its info string's first word, its code, its indentation)."""
    from .lists import fenced_blocks as found

    return found(text)


__all__ = ["VERSION", "Rendered", "Resolved", "WikiLink", "excerpt", "fenced_blocks",
           "flatten_embeds", "hide_draft_links", "pygments_css", "render"]
