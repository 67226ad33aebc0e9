"""An entry's stored HTML as the public site shows it.

The stored HTML links into the notebook (/entries/…, /weeks/…, /tags/…, /runs/…,
/attachments/…). Here every such link becomes a relative link to the public copy, or,
where there is none (a private or draft entry, a private tag, a run's page, any other
page of the notebook), plain text: the words the public entry itself wrote, with no
address and no title of what it pointed at. A run card keeps its numbers and sentences;
its inline charts become one image, the card's standalone SVG (app/journal/views/cards.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html import escape, unescape
from urllib.parse import quote, unquote

from app.notebook.attachments import safe_filename
from app.notebook.render import flatten_embeds
from app.publishing.selection import Public, entry_path, tag_path

_LINK_RE = re.compile(r"<a\b([^>]*)>(.*?)</a>", re.S)
_HREF_RE = re.compile(r'\bhref="([^"]*)"')
_IMG_RE = re.compile(r"<img\b[^>]*>")
_SRC_RE = re.compile(r'\bsrc="([^"]*)"')
_ALT_RE = re.compile(r'\balt="([^"]*)"')
_ENTRY_RE = re.compile(r"^/entries/(\d{1,12})(?:/[^?#]*)?(#[^?]*)?$")
_WEEK_RE = re.compile(r"^/weeks/(\d{4}-W\d{2})(#[^?]*)?$")
_TAG_RE = re.compile(r"^/tags/([^?#]+)$")
_ATTACHMENT_RE = re.compile(r"^/attachments/([0-9a-f]{64})/([^?#/]*)$")
_EXTERNAL_RE = re.compile(r"^(?:https?:|mailto:|#)", re.I)
# A run card's body as cards.card stores it (app/notebook/atom.feed_alternative's mark).
_CARD_RE = re.compile(
    r'<div class="feed-alternative" data-feed-img="/runs/(\d{1,12})/card\.svg\?v=[0-9a-f]+" '
    r'data-feed-alt="([^"<>]*)">(.*?)</div><!--/feed-alternative-->', re.S)
_MARKUP_RE = re.compile(r"<[^>]*>")
_SIZE_RE = re.compile(r'<svg [^>]*?width="(\d+)" height="(\d+)"')
_CHARTS_RE = re.compile(r'<div class="card-charts">(?:(?!</div>).)*</div>', re.S)


@dataclass
class Sources:
    """What a rewrite links to: the public entries, the stored attachments' content hashes
    and the run cards' images (run id → the standalone SVG)."""

    site: Public
    attachments: set[str]
    cards: dict[int, str]


@dataclass
class Used:
    """What the public HTML of the site reaches: entries (for backlinks), attachments
    (by content hash: their files are copied) and runs (their card images are drawn)."""

    entries: dict[int, set[int]] = field(default_factory=dict)  # target → linking sources
    attachments: set[tuple[str, str]] = field(default_factory=set)  # (hash, file name)
    runs: set[int] = field(default_factory=set)


def plain_text(html: str) -> str:
    """Public HTML's words, for the site's search index."""
    return " ".join(unescape(_MARKUP_RE.sub(" ", html)).split())


def card_runs(html: str) -> set[int]:
    """The runs whose cards a stored HTML shows."""
    return {int(m[1]) for m in _CARD_RE.finditer(html)}


def card_image_path(run_id: int) -> str:
    return f"runs/{run_id}.svg"


def attachment_path(sha: str, filename: str) -> str:
    return f"attachments/{sha}/{filename}"


def rewrite(html: str, source_id: int, sources: Sources, used: Used, prefix: str) -> str:
    """`html` with every link made public or plain text; `prefix` leads from the page to
    the site's root ("" or "../", or the site's address in the feed)."""
    site, files = sources.site, sources.attachments

    def target(href: str) -> tuple[str | None, str]:
        """(the public address, or None; the class the link keeps)."""
        href = unescape(href)
        if _EXTERNAL_RE.match(href):
            return href, ""
        if m := _ENTRY_RE.match(href):
            entry = site.by_id.get(int(m[1]))
            if entry is None:
                return None, ""
            used.entries.setdefault(entry.id, set()).add(source_id)
            return prefix + entry_path(entry) + (m[2] or ""), "wikilink"
        if m := _WEEK_RE.match(href):
            entry = site.by_week.get(m[1])
            if entry is None:
                return None, ""
            used.entries.setdefault(entry.id, set()).add(source_id)
            return prefix + entry_path(entry) + (m[2] or ""), "wikilink"
        if (m := _TAG_RE.match(href)) and unquote(m[1]) in site.by_tag:
            return prefix + tag_path(unquote(m[1])), "tag"
        if (m := _ATTACHMENT_RE.match(href)) and m[1] in files:
            # named as the public entry names it: the name it was uploaded under may be
            # a private entry's (the same bytes are stored once)
            name = safe_filename(unquote(m[2]))
            used.attachments.add((m[1], name))
            return prefix + quote(attachment_path(m[1], name)), ""
        return None, ""

    def link(m: re.Match[str]) -> str:
        href = _HREF_RE.search(m[1])
        if href is None:
            return m[0]
        if _EXTERNAL_RE.match(unescape(href[1])):
            return m[0]  # a link out of the notebook, or within the page: as written
        address, kind = target(href[1])
        if address is None:
            return f'<span class="unlinked">{m[2]}</span>'
        cls = f' class="{kind}"' if kind else ""
        return f'<a{cls} href="{escape(address)}">{m[2]}</a>'

    def image(m: re.Match[str]) -> str:
        src = _SRC_RE.search(m[0])
        address = src and target(src[1])[0]
        if address is None:
            alt = _ALT_RE.search(m[0])
            return f'<span class="unlinked">{alt[1] if alt else ""}</span>'
        return m[0].replace(src[0], f'src="{escape(address)}"')

    def card(m: re.Match[str]) -> str:
        run_id = int(m[1])
        svg = sources.cards.get(run_id)
        if svg is None:  # (a run deleted since): its numbers, without the charts
            return f'<div class="card-body">{_CHARTS_RE.sub("", m[3])}</div>'
        used.runs.add(run_id)
        # the image's own size, so the page does not shift when it arrives
        size = _SIZE_RE.search(svg)
        picture = (f'<p class="card-image"><img src="{prefix}{card_image_path(run_id)}" '
                   f'alt="{m[2]}" width="{size[1]}" height="{size[2]}"></p>')
        # the first chart's place takes the image (all charts, one above the other)
        body = _CHARTS_RE.sub("", _CHARTS_RE.sub(lambda _: picture, m[3], count=1))
        return f'<div class="card-body">{body}</div>'

    def public_embed(source: str) -> bool:
        href = _HREF_RE.search(source)
        return href is not None and target(href[1])[0] is not None

    # An embedded note's text was copied into this entry when it was saved: a note that is
    # not public is cut to its source line, as its link is cut to its words.
    html = flatten_embeds(html, public_embed)
    html = _IMG_RE.sub(image, _LINK_RE.sub(link, html))
    return _CARD_RE.sub(card, html)  # last: its image is already a link of the site
