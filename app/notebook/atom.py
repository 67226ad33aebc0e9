"""The Atom feed: published entries and letters, full content, newest first.

Feed readers drop inline SVG (and any script or style), so a part of an entry that needs
them (a run card's charts and tables) is marked by the embed that made it
(`feed_alternative`) and the feed shows an image in its place (`for_feed`): a standalone
SVG served from the notebook, carrying the feed's token when the feed was read with one.
"""

from __future__ import annotations

import datetime as dt
import re
from html import escape
from urllib.parse import quote
from xml.etree import ElementTree as ET

import sqlalchemy as sa
from sqlalchemy.orm import Session

from app.models import Entry
from app.notebook.addresses import entry_url
from app.notebook.render import hide_draft_links

ATOM = "http://www.w3.org/2005/Atom"
# Characters XML 1.0 cannot carry (a pasted note can hold U+FFFE; a title stored before
# titles refused control characters, NUL): one of them makes the whole feed unreadable.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def xml_text(text: str) -> str:
    """`text` with what XML 1.0 cannot carry left out."""
    return _NOT_XML.sub("", text)


# A same-origin path to an SVG (never "//host": the feed's token may be added to it).
_IMAGE = r"/[A-Za-z0-9_-][A-Za-z0-9_/.-]{0,200}\.svg(?:\?v=[0-9a-f]{1,64})?"
_ALTERNATIVE_RE = re.compile(
    rf'<div class="feed-alternative" data-feed-img="({_IMAGE})" data-feed-alt="([^"<>]*)">'
    r".*?</div><!--/feed-alternative-->", re.S)


def feed_alternative(inner_html: str, image: str, alt: str) -> str:
    """Wrap HTML that the feed replaces by `image` (a same-origin .svg path) with `alt`."""
    if not re.fullmatch(_IMAGE, image):
        raise ValueError(f"not a same-origin SVG path: {image!r}")
    return (f'<div class="feed-alternative" data-feed-img="{image}" '
            f'data-feed-alt="{escape(alt)}">{inner_html}</div><!--/feed-alternative-->')


def for_feed(html: str, token: str | None = None) -> str:
    """Stored HTML as a feed reader gets it: marked parts become their image."""
    def image(m: re.Match[str]) -> str:
        src = m[1] + ((("&amp;" if "?" in m[1] else "?") + "token=" + quote(token, safe=""))
                      if token else "")
        return f'<p><img src="{src}" alt="{m[2]}"></p>'
    return _ALTERNATIVE_RE.sub(image, html) if "feed-alternative" in html else html


# A link or image address within the notebook: a fragment (a heading's ¶), or a path.
_LOCAL_RE = re.compile(r'(<(?:a|img)\b[^>]*?\s(?:href|src)=")([#/])(?!/)')


def absolute(html: str, page_url: str, base_url: str) -> str:
    """Links made absolute: a feed reader shows the entry on a page of its own, where
    `#h-notes` would point into that page and xml:base makes it the notebook's home
    (`https://host/#h-notes`), not the letter's heading. Paths are given the origin too,
    for readers that ignore xml:base."""
    def whole(m: re.Match[str]) -> str:
        return m[1] + (page_url + "#" if m[2] == "#" else base_url + "/")
    return _LOCAL_RE.sub(whole, html)


def _iso(moment: dt.datetime) -> str:
    return moment.replace(tzinfo=dt.UTC).isoformat().replace("+00:00", "Z")


def build(session: Session, base_url: str, *, limit: int = 50, title: str = "Commonplace",
          token: str | None = None) -> bytes:
    """An Atom 1.0 document (RFC 4287). base_url is the notebook's origin, e.g.
    https://notes.tail1234.ts.net — entry ids and links are made absolute from it. `token`:
    the feed token the feed was read with, added to its images' addresses (a feed reader
    fetches them as it fetched the feed, with no other credentials)."""
    base_url = base_url.rstrip("/")
    entries = list(
        session.scalars(
            sa.select(Entry).where(Entry.status == "published")
            .order_by(Entry.updated_at.desc(), Entry.id.desc()).limit(limit)
        )
    )
    ET.register_namespace("", ATOM)
    feed = ET.Element(f"{{{ATOM}}}feed")
    ET.SubElement(feed, f"{{{ATOM}}}title").text = title
    ET.SubElement(feed, f"{{{ATOM}}}id").text = f"{base_url}/"
    updated = max((e.updated_at for e in entries), default=dt.datetime(2000, 1, 1))
    ET.SubElement(feed, f"{{{ATOM}}}updated").text = _iso(updated)
    ET.SubElement(feed, f"{{{ATOM}}}link", href=f"{base_url}/feed.atom", rel="self",
                  type="application/atom+xml")
    ET.SubElement(feed, f"{{{ATOM}}}link", href=f"{base_url}/", rel="alternate",
                  type="text/html")
    author = ET.SubElement(feed, f"{{{ATOM}}}author")
    ET.SubElement(author, f"{{{ATOM}}}name").text = "Commonplace"
    for entry in entries:
        item = ET.SubElement(feed, f"{{{ATOM}}}entry")
        ET.SubElement(item, f"{{{ATOM}}}title").text = xml_text(entry.title)
        # A stable id that survives title changes (RFC 4287 4.2.6: never changes).
        ET.SubElement(item, f"{{{ATOM}}}id").text = f"{base_url}/entries/{entry.id}"
        page = base_url + entry_url(entry)
        ET.SubElement(item, f"{{{ATOM}}}link", href=page, rel="alternate", type="text/html")
        ET.SubElement(item, f"{{{ATOM}}}published").text = _iso(
            dt.datetime.combine(entry.date, dt.time())
        )
        ET.SubElement(item, f"{{{ATOM}}}updated").text = _iso(entry.updated_at)
        for tag in entry.all_tags:
            ET.SubElement(item, f"{{{ATOM}}}category", term=tag)
        # Sanitized at save time; the feed carries the page's HTML (no scripts), with images
        # for what readers drop. xml:base makes relative links (/entries/…, /runs/…) absolute.
        content = ET.SubElement(item, f"{{{ATOM}}}content", type="html")
        content.set("{http://www.w3.org/XML/1998/namespace}base", base_url + "/")
        # a feed reader sees no drafts
        content.text = xml_text(absolute(for_feed(hide_draft_links(entry.body_html), token),
                                         page, base_url))
    return ET.tostring(feed, encoding="utf-8", xml_declaration=True)
