"""The public site's Atom feed (RFC 4287): its newest public entries, full content, every
address absolute (a feed reader resolves nothing against the page it came from)."""

from __future__ import annotations

import datetime as dt
import re
from urllib.parse import urlsplit
from xml.etree import ElementTree as ET

from app.models import Entry
from app.notebook.atom import xml_text

ATOM = "http://www.w3.org/2005/Atom"
LIMIT = 50


def check_base_url(url: str) -> str:
    """The site's public address, e.g. https://notes.example.org/ or …/notes/: what
    makes the feed's links absolute. Refused unless it is a plain http(s) address."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query \
            or parts.fragment or parts.username or re.search(r"\s", url):
        raise ValueError(f"--base-url must be an http(s) address like https://notes.example.org/,"
                         f" not {url!r}")
    return url.rstrip("/") + "/"


def _iso(moment: dt.datetime) -> str:
    return moment.replace(tzinfo=dt.UTC).isoformat().replace("+00:00", "Z")


def build(entries: list[tuple[Entry, str, str, list[str]]], base_url: str,
          title: str) -> bytes:
    """`entries`: (entry, its page's path, its public HTML with absolute links, its tags),
    newest first."""
    ET.register_namespace("", ATOM)
    feed = ET.Element(f"{{{ATOM}}}feed")
    ET.SubElement(feed, f"{{{ATOM}}}title").text = title
    ET.SubElement(feed, f"{{{ATOM}}}id").text = base_url
    newest = max((e.updated_at for e, *_ in entries), default=dt.datetime(2000, 1, 1))
    ET.SubElement(feed, f"{{{ATOM}}}updated").text = _iso(newest)
    ET.SubElement(feed, f"{{{ATOM}}}link", href=base_url + "feed.atom", rel="self",
                  type="application/atom+xml")
    ET.SubElement(feed, f"{{{ATOM}}}link", href=base_url, rel="alternate", type="text/html")
    ET.SubElement(ET.SubElement(feed, f"{{{ATOM}}}author"), f"{{{ATOM}}}name").text = title
    for entry, path, html, tags in entries[:LIMIT]:
        item = ET.SubElement(feed, f"{{{ATOM}}}entry")
        ET.SubElement(item, f"{{{ATOM}}}title").text = xml_text(entry.title)
        # stable across a change of title (RFC 4287 4.2.6: an id never changes)
        ET.SubElement(item, f"{{{ATOM}}}id").text = f"{base_url}entries/{entry.id}"
        ET.SubElement(item, f"{{{ATOM}}}link", href=base_url + path, rel="alternate",
                      type="text/html")
        ET.SubElement(item, f"{{{ATOM}}}published").text = _iso(
            dt.datetime.combine(entry.date, dt.time()))
        ET.SubElement(item, f"{{{ATOM}}}updated").text = _iso(entry.updated_at)
        for tag in tags:
            ET.SubElement(item, f"{{{ATOM}}}category", term=tag)
        ET.SubElement(item, f"{{{ATOM}}}content", type="html").text = xml_text(html)
    return ET.tostring(feed, encoding="utf-8", xml_declaration=True)
