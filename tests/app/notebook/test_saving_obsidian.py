"""Obsidian's links and embeds through a save in two steps (app/notebook/saving.py): the
HTML is the one a single render gives, a note embedding the saved one shows its new text,
and `publish` is carried by every kind of save."""

from __future__ import annotations

import io

import pytest

from app.models import Entry, Revision
from app.notebook import attachments, entries, saving
from app.notebook.render.isolated import SMALL
from tests.helpers import load

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 32
BUBBLES = "Intro.\n\n## Notes\n\nBubbles idle the stages.\n\n## Other\n\nnot this\n"
BODY = ("See [[Pipeline bubbles#Notes]] and [[Pipeline bubbles#^nowhere|there]].\n\n"
        "![[image.png]]\n\n![[image.png|100x80]] beside ![[Pipeline bubbles#Notes]]\n\n"
        "![[Pipeline bubbles]]\n\n![[Nowhere]]\n\n![[Secret]]\n\n![[missing.png]]\n\n"
        "[[paper.pdf]] and [[gone.pdf]]\n\n```python\nx = 1\n```\n")


def create(db, title, body="", **fields):
    with db.write() as session:
        return entries.create(session, author="me", date="2024-03-27", title=title,
                              body=body, **fields).id


def save(db, prepare, **kwargs):
    with db.read() as reader:
        prepared = prepare(reader, **kwargs)
    with db.write() as session:
        return saving.commit(session, prepared, author="me").id


def attach(db, data_dir, entry_id, name, content=PNG):
    with db.write() as session:
        attachments.store(session, data_dir, entries.get(session, entry_id),
                          io.BytesIO(content), name)


@pytest.fixture
def notebook(db, data_dir):
    bubbles = create(db, "Pipeline bubbles", BUBBLES)
    create(db, "Secret", "draft text", status="draft")
    attach(db, data_dir, bubbles, "image.png")
    attach(db, data_dir, bubbles, "paper.pdf", b"%PDF-1.4\n")
    return bubbles


@pytest.mark.parametrize("body", [BODY, BODY + "\n" + "filler words here. " * (SMALL // 19)],
                         ids=["in-process", "in-a-child"])
def test_a_save_in_two_steps_stores_the_html_one_render_gives(db, notebook, body):
    entry_id = save(db, saving.prepare_create, date="2024-03-28", title="Reading", body=body)
    with db.read() as reader:
        stored = entries.get(reader, entry_id)
        once = entries.render_body(reader, stored.body_md)
        assert stored.body_html == once.html and stored.toc_html == once.toc_html
    html = once.html
    assert 'class="note-embed"' in html and "Bubbles idle the stages." in html
    assert "<img" in html and 'class="missing-embed">missing.png' in html
    assert 'class="wikilink missing" href="/entries/new?title=Nowhere"' in html
    assert 'class="wikilink draft"' in html and "draft text" not in html
    assert "#h-notes" in html


def test_a_note_embedding_the_saved_one_shows_its_new_text(db, notebook):
    embedder = create(db, "Reading", "![[Pipeline bubbles]]\n\nand ![[Later]]")
    save(db, saving.prepare_update, entry_id=notebook,
         changes={"body": "Bubbles, rewritten."}, base_revision=1)
    assert "Bubbles, rewritten." in load(db, Entry, embedder).body_html
    later = create(db, "Old name", "the later text")
    save(db, saving.prepare_update, entry_id=later, changes={"title": "Later"},
         base_revision=1)
    with db.read() as reader:
        shown = entries.get(reader, embedder)
        assert "the later text" in shown.body_html
        assert shown.body_html == entries.render_body(reader, shown.body_md).html


def test_an_attachment_added_between_the_steps_moves_the_save(db, data_dir, notebook):
    with db.read() as reader:
        prepared = saving.prepare_create(reader, date="2024-03-28", title="Reading",
                                         body="![[late.png]]")
    attach(db, data_dir, notebook, "late.png")
    with db.write() as session, pytest.raises(saving.Moved):
        saving.commit(session, prepared, author="me")
    entry_id = save(db, saving.prepare_create, date="2024-03-28", title="Reading",
                    body="![[late.png]]")
    assert "<img" in load(db, Entry, entry_id).body_html


def test_publish_is_kept_through_create_update_and_restore(db):
    entry_id = save(db, saving.prepare_create, date="2024-03-28", title="Public",
                    body="x", publish=True)
    assert load(db, Entry, entry_id).publish is True
    save(db, saving.prepare_update, entry_id=entry_id, changes={"publish": False},
         base_revision=1)
    assert (load(db, Entry, entry_id).publish, load(db, Entry, entry_id).revision) == (False, 2)
    save(db, saving.prepare_restore, entry_id=entry_id, number=1, base_revision=2)
    restored = load(db, Entry, entry_id)
    assert (restored.publish, restored.revision) == (True, 3)
    with db.read() as reader:
        kept = [r.publish for r in reader.query(Revision).filter_by(entry_id=entry_id)
                .order_by(Revision.number)]
    assert kept == [True, False, True]
    with db.read() as reader, pytest.raises(entries.Invalid) as refused:
        saving.prepare_update(reader, entry_id, {"publish": "yes"}, base_revision=3)
    assert refused.value.field == "publish"
