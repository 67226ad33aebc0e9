"""The Atom feed, read as a feed reader reads it (feedparser): valid Atom 1.0, published
entries only, with their content, links and tags."""

import re
from xml.etree import ElementTree as ET

import feedparser
import sqlalchemy as sa

from app.models import Entry
from app.notebook import atom
from app.notebook.isoweeks import iso_week, today
from tests.helpers import count


def this_week() -> str:
    return iso_week(today("UTC"))


def test_feed_is_valid_atom_with_published_entries_only(client):
    client.post("/api/v1/entries", json={"title": "Public <b>", "body": "**bold** text",
                                         "date": "2024-03-30", "tags": ["ml"]})
    client.post("/api/v1/entries", json={"title": "Secret draft", "status": "draft"})
    r = client.get("/feed.atom")
    assert r.status_code == 200 and r.mimetype == "application/atom+xml"
    feed = feedparser.parse(r.data)
    assert not feed.bozo, feed.get("bozo_exception")
    assert feed.version == "atom10"
    titles = [e.title for e in feed.entries]
    assert "Public <b>" in titles and "Secret draft" not in titles
    item = next(e for e in feed.entries if e.title == "Public <b>")
    assert item.id.startswith("http://localhost/entries/")
    assert item.link.startswith("http://localhost/entries/")
    assert "<strong>bold</strong>" in item.content[0].value
    assert item.tags[0].term == "ml"
    assert feed.feed.id and feed.feed.updated
    for entry in feed.entries:
        assert entry.id and entry.updated and entry.title


def test_links_in_the_feed_are_absolute_to_their_letter(client):
    """A feed reader shows a letter on a page of its own: a heading's ¶ link leads to that
    heading of the letter (not to the notebook's home, as xml:base alone made it); other
    links carry the notebook's origin."""
    letter = client.get("/api/v1/weeks/" + this_week()).get_json()["letter"]
    saved = client.put(f"/api/v1/entries/{letter['id']}", json={
        "base_revision": letter["revision"],
        "body": "## Notes\n\nSee [[Other note]] and [the site map](/sitemap).\n\n"
                "## Next\n\n[Back up](#h-notes)."})
    assert saved.status_code == 200, saved.text
    client.post("/api/v1/entries", json={"title": "Other note", "status": "published"})
    raw = client.get("/feed.atom").get_data(as_text=True)
    feed = feedparser.parse(raw)
    assert not feed.bozo, feed.get("bozo_exception")
    item = next(e for e in feed.entries if e.id.endswith(f"/entries/{letter['id']}"))
    page = f"http://localhost/weeks/{this_week()}"
    assert item.link == page
    hrefs = re.findall(r'href="([^"]*)"', item.content[0].value)
    assert f"{page}#h-notes" in hrefs and f"{page}#h-next" in hrefs  # the ¶ links
    assert hrefs.count(f"{page}#h-notes") == 2  # and the link written in the text
    assert "http://localhost/sitemap" in hrefs
    assert any(h.startswith("http://localhost/entries/") for h in hrefs)  # [[Other note]]
    assert all(h.startswith("http://localhost/") for h in hrefs), hrefs
    assert "/#h-notes" not in hrefs and "http://localhost/#h-notes" not in hrefs
    assert f'href="{page}#h-notes"' in raw  # absolute as sent, whatever a reader's xml:base


def test_absolute_leaves_other_sites_and_protocol_relative_addresses_alone():
    html = ('<a href="https://example.org/x">a</a><a href="//evil.example/y">b</a>'
            '<a class="headerlink" href="#h-a">¶</a><img src="/runs/1/card.svg" alt="">'
            '<a href="mailto:me@example.org">m</a>')
    out = atom.absolute(html, "https://n.test/weeks/2026-W49", "https://n.test")
    assert out == ('<a href="https://example.org/x">a</a><a href="//evil.example/y">b</a>'
                   '<a class="headerlink" href="https://n.test/weeks/2026-W49#h-a">¶</a>'
                   '<img src="https://n.test/runs/1/card.svg" alt="">'
                   '<a href="mailto:me@example.org">m</a>')


def test_the_feed_stays_xml_whatever_the_text_holds(client, db):
    """A note pasted with U+FFFE in it, and a title stored with a NUL before titles refused
    control characters, are left out of the feed rather than making it unreadable."""
    made = client.post("/api/v1/entries", json={"title": "Pasted", "body": "a \ufffe b \uffff c"})
    assert made.status_code == 201
    with db.write() as session:
        session.execute(sa.update(Entry).where(Entry.id == made.get_json()["id"])
                        .values(title="Old\x00title"))
    raw = client.get("/feed.atom").data
    ET.fromstring(raw)  # expat refuses what is not XML 1.0
    item = next(e for e in feedparser.parse(raw).entries if e.title == "Oldtitle")
    assert "a  b  c" in item.content[0].value


def test_a_title_with_a_control_character_is_refused(client, db):
    for title in ("nul\x00byte", "\x00", "bell\x07", "esc\x1b[31m", "x\uffff"):
        r = client.post("/api/v1/entries", json={"title": title})
        assert r.status_code == 422 and r.get_json()["error"]["field"] == "title", title
    assert count(db, Entry) == 0
    assert client.post("/api/v1/entries", json={"title": "tab\tand\nline"}).status_code == 201
