"""The Atom feed: published entries and letters, full content, newest first."""

from __future__ import annotations

import datetime as dt
from xml.etree import ElementTree as ET

import sqlalchemy as sa
from sqlalchemy.orm import Session

from app.models import Entry
from app.notebook.entries import entry_url
from app.notebook.render import hide_draft_links

ATOM = "http://www.w3.org/2005/Atom"


def _iso(moment: dt.datetime) -> str:
    return moment.replace(tzinfo=dt.UTC).isoformat().replace("+00:00", "Z")


def build(session: Session, base_url: str, *, limit: int = 50, title: str = "Commonplace") -> bytes:
    """An Atom 1.0 document (RFC 4287). base_url is the notebook's origin, e.g.
    https://notes.tail1234.ts.net — entry ids and links are made absolute from it."""
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
        ET.SubElement(item, f"{{{ATOM}}}title").text = entry.title
        # A stable id that survives title changes (RFC 4287 4.2.6: never changes).
        ET.SubElement(item, f"{{{ATOM}}}id").text = f"{base_url}/entries/{entry.id}"
        ET.SubElement(item, f"{{{ATOM}}}link", href=base_url + entry_url(entry),
                      rel="alternate", type="text/html")
        ET.SubElement(item, f"{{{ATOM}}}published").text = _iso(
            dt.datetime.combine(entry.date, dt.time())
        )
        ET.SubElement(item, f"{{{ATOM}}}updated").text = _iso(entry.updated_at)
        for tag in entry.tag_list:
            ET.SubElement(item, f"{{{ATOM}}}category", term=tag)
        # Sanitized at save time; the feed carries the same HTML as the page (no scripts).
        # xml:base makes the entry's relative links (/entries/…, /runs/…) absolute.
        content = ET.SubElement(item, f"{{{ATOM}}}content", type="html")
        content.set("{http://www.w3.org/XML/1998/namespace}base", base_url + "/")
        content.text = hide_draft_links(entry.body_html)  # a feed reader sees no drafts
    return ET.tostring(feed, encoding="utf-8", xml_declaration=True)
