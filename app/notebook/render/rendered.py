"""What a render gives and takes (Rendered, WikiLink, Resolved), and what readers of
stored HTML need (hide_draft_links): the light half of the pipeline, which a page can
import without loading Python-Markdown."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import NamedTuple
from urllib.parse import quote


@dataclass(frozen=True)
class WikiLink:
    target: str  # normalised as written: "Some Title", "2024-W13", "2024-03-31"
    text: str  # display text: the alias after "|", else the target
    context: str  # plain text of the enclosing paragraph / list item, ~240 chars


@dataclass(frozen=True)
class Rendered:
    html: str  # sanitized body, safe to insert into a page as-is
    toc_html: str  # sanitized table of contents; "" with fewer than 2 headings
    links: list[WikiLink]  # document order, de-duplicated by target
    tags: list[str]  # lowercased, de-duplicated, document order
    text: str  # plain text for full-text indexing
    tasks: list[bool] = field(default_factory=list)  # task box n is ticked (data-task="n")


class Resolved(NamedTuple):
    """Where a [[wiki link]] goes: its URL, whether the target exists, and whether it is a
    draft (shown only to those who may see drafts: `hide_draft_links`)."""

    url: str
    exists: bool
    draft: bool = False


def default_resolve_link(target: str) -> Resolved:
    return Resolved("/search?q=" + quote(target, safe=""), False)


# A link the render marked as going to a draft; the class comes from the pipeline (user
# HTML may claim it too, which only hides that link from readers).
DRAFT_LINK_RE = re.compile(r'<a\b[^>]*\bclass="wikilink draft"[^>]*>(.*?)</a>', re.S)


def hide_draft_links(html: str) -> str:
    """Stored HTML as a reader who may not see drafts gets it: a link to a draft reads as
    a link to nothing (its text stays, the draft's address does not)."""
    if "wikilink draft" not in html:
        return html
    return DRAFT_LINK_RE.sub(r'<span class="wikilink missing">\1</span>', html)


def default_tag_url(tag: str) -> str:
    return "/tags/" + quote(tag, safe="/")
