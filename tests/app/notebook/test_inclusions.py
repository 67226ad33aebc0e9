"""Obsidian's links and embeds when a note is saved: heading links and their backlinks,
`![[image.png]]` from the notebook's attachments, `![[Note]]` from the stored note."""

from __future__ import annotations

import io
import re

import sqlalchemy as sa

from app.models import Link, Setting
from app.notebook import attachments, bulk_render, entries, rerender
from app.notebook.addresses import entry_url
from app.notebook.render import Resolved
from tests.helpers import Elements, anchors

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 32


def create(db, title, body, **fields):
    fields.setdefault("date", "2024-03-27")
    with db.write() as session:
        entry = entries.create(session, author="me@example.com", title=title, body=body,
                               **fields)
        return entry.id, entry_url(entry)


def html_of(db, entry_id):
    with db.read() as session:
        return entries.get(session, entry_id).body_html


def attach(db, data_dir, entry_id, name, content=PNG):
    with db.write() as session:
        found = attachments.store(session, data_dir, entries.get(session, entry_id),
                                  io.BytesIO(content), name)
        return attachments.url_for_attachment(found)


BUBBLES = "Intro.\n\n## Notes\n\nBubbles idle the stages.\n\n## Other\n\nnot this\n"


def test_heading_link_goes_to_the_heading_and_is_a_backlink(db):
    target, url = create(db, "Pipeline bubbles", BUBBLES)
    source, _ = create(db, "Reading",
                       "See [[Pipeline bubbles#Notes]] and [[Pipeline bubbles|the note]].")
    [(first, _), (second, _)] = anchors(html_of(db, source), "wikilink")
    assert first["href"] == url + "#h-notes" and first["class"] == "wikilink"
    assert 'id="h-notes"' in html_of(db, target)
    assert second["href"] == url
    with db.read() as session:
        keys = session.scalars(sa.select(Link.target_key).where(Link.source_id == source)).all()
    assert keys == ["pipeline bubbles"]


def test_image_embeds_find_attachments_by_name_newest_first_any_case(db, data_dir):
    holder, _ = create(db, "Holder", "files")
    attach(db, data_dir, holder, "Diagram One.png")
    newest = attach(db, data_dir, holder, "diagram one.png", PNG + b"newer")
    source, _ = create(db, "Uses", "![[Diagram One.png|120]]\n\n![[DIAGRAM ONE.PNG]]\n\n"
                                   "![[absent.png]]")
    found = Elements(html_of(db, source))
    assert [img["src"] for img, _ in found.all("img")] == [newest, newest]
    assert found.all("img")[0][0]["width"] == "120"
    assert found.all("span", "missing-embed")[0][1] == "absent.png"


def test_note_embed_shows_the_section_framed_under_a_link(db):
    _, url = create(db, "Pipeline bubbles", BUBBLES)
    source, _ = create(db, "Summary", "![[Pipeline bubbles#Notes]]")
    html = html_of(db, source)
    assert '<div class="note-embed">' in html
    [(link, _)] = anchors(html, "wikilink")
    assert link["href"] == url + "#h-notes"
    assert "Bubbles idle the stages." in html and "not this" not in html and "Intro" not in html
    with db.read() as session:
        assert "Bubbles" not in session.scalar(sa.text(
            "SELECT body FROM entry_fts WHERE rowid = :id"), {"id": source})


def test_a_draft_is_never_embedded(db):
    create(db, "Secret plan", "the secret", status="draft")
    source, _ = create(db, "Public", "![[Secret plan]]")
    html = html_of(db, source)
    assert "the secret" not in html and "note-embed" not in html
    assert anchors(html, "wikilink")[0][0]["class"] == "wikilink draft"


def test_notes_embedding_each_other_stop_at_one_level(db):
    a, _ = create(db, "Alpha", "alpha text\n\n![[Beta]]")
    b, _ = create(db, "Beta", "beta text\n\n![[Alpha]]")
    with db.write() as session:
        entry = entries.get(session, a)
        entries.update(session, entry, {"body": "alpha again\n\n![[Beta]]"},
                       base_revision=entry.revision, author="me")
    html = html_of(db, a)
    assert html.count('<div class="note-embed">') == 1
    assert "beta text" in html
    # Beta's own embed of Alpha is only a link inside the frame, never Alpha's text again
    assert "alpha text" not in html and re.search(r">Alpha</a>", html)
    assert html_of(db, b).count('<div class="note-embed">') == 1


def test_a_renderer_change_rewrites_links_and_search_text_too(db):
    target, url = create(db, "Pipeline bubbles", BUBBLES)
    source, _ = create(db, "Reading", "[[Pipeline bubbles#Notes]] %%private aside%%")
    with db.write() as session:  # as the renderer before Obsidian's links left it
        session.execute(sa.update(Link).where(Link.source_id == source)
                        .values(target_key="pipeline bubbles#notes"))
        session.execute(sa.text("UPDATE entry_fts SET body = 'private aside' WHERE rowid = :id"),
                        {"id": source})
        session.execute(sa.update(Setting).where(Setting.key == rerender.VERSION_KEY)
                        .values(value="4"))
    assert rerender.refresh_all(db) >= 2
    with db.read() as session:
        keys = session.scalars(sa.select(Link.target_key).where(Link.source_id == source)).all()
        text = session.scalar(sa.text("SELECT body FROM entry_fts WHERE rowid = :id"),
                              {"id": source})
    assert keys == ["pipeline bubbles"] and "private" not in text
    assert anchors(html_of(db, source), "wikilink")[0][0]["href"] == url + "#h-notes"


def test_bulk_import_keeps_heading_fragments_and_leaves_embeds_open_for_the_importer():
    nonce = "f" * 32
    tpl = bulk_render.template(("See [[Note#Part two]] and [[Note#^b1|that]].", nonce, ()))
    assert tpl is not None and tpl.targets == ["Note"]
    html, _ = bulk_render.place_links(bulk_render.placeholder_re(nonce), tpl,
                                      lambda target: Resolved("/entries/9/note", True))
    assert hrefs_of(html) == ["/entries/9/note#h-part-two", "/entries/9/note#b-b1"]
    # rendered in the worker, outside the write lock; what an embed names is filled in by
    # the writer: an attachment from the import's files (none in this process), a note
    # from the notebook
    image = bulk_render.template(("![[image.png]]", nonce, ()))
    assert image is not None and list(image.files) == ["image.png"]
    note = bulk_render.template(("![[Note]]", nonce, ()))
    assert note is not None and [n[0] for n in note.notes] == ["Note"]
    assert "CPNOTE" in note.html  # the note's place, left open


def hrefs_of(html):
    return [attrs["href"] for attrs, _ in anchors(html, "wikilink")]


def test_an_embedding_note_shows_the_embedded_one_as_it_is_now(db):
    target, _ = create(db, "Pipeline bubbles", BUBBLES)
    source, _ = create(db, "Summary", "![[Pipeline bubbles#Notes]]")
    with db.write() as session:
        entry = entries.get(session, target)
        entries.update(session, entry, {"body": BUBBLES.replace("idle", "stall")},
                       base_revision=entry.revision, author="me")
    assert "Bubbles stall the stages." in html_of(db, source)
