"""The Atom feed, read as a feed reader reads it (feedparser): valid Atom 1.0, published
entries only, with their content, links and tags."""

import feedparser


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
