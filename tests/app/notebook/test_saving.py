"""A save in two steps (app/notebook/saving.py): what was prepared on a snapshot is
written only if the snapshot still holds; otherwise nothing is written and the save is
prepared again, merging with what was saved in between."""

import pytest

from app.models import Entry
from app.notebook import entries, saving
from tests.helpers import load


def create(db, **fields):
    with db.write() as session:
        return entries.create(session, author="me", date="2024-03-27", **fields)


def prepare_update(db, entry_id, changes, base):
    with db.read() as reader:
        return saving.prepare_update(reader, entry_id, changes, base_revision=base)


def test_a_save_overtaken_between_its_steps_is_prepared_again_and_merged(db):
    entry = create(db, title="Notes", body="a\nb\nc")
    mine = prepare_update(db, entry.id, {"body": "A\nb\nc"}, 1)
    with db.write() as session:  # another device saves in between
        entries.update(session, entries.get(session, entry.id), {"body": "a\nb\nC"},
                       base_revision=1, author="phone")
    with db.write() as session, pytest.raises(saving.Moved):
        saving.commit(session, mine, author="laptop")
    assert load(db, Entry, entry.id).revision == 2  # nothing written
    again = prepare_update(db, entry.id, {"body": "A\nb\nc"}, 1)
    with db.write() as session:
        saving.commit(session, again, author="laptop")
    saved = load(db, Entry, entry.id)
    assert (saved.revision, saved.body_md) == (3, "A\nb\nC")


def test_a_new_link_to_a_renamed_entry_made_in_between_moves_the_rename(db):
    target = create(db, title="Old name", body="x")
    rename = prepare_update(db, target.id, {"title": "New name"}, 1)
    linker = create(db, title="Linker", body="see [[New name]]")
    assert "wikilink missing" in linker.body_html
    with db.write() as session, pytest.raises(saving.Moved):
        saving.commit(session, rename, author="me")
    again = prepare_update(db, target.id, {"title": "New name"}, 1)
    with db.write() as session:
        saving.commit(session, again, author="me")
    shown = load(db, Entry, linker.id).body_html
    assert f'class="wikilink" href="/entries/{target.id}/new-name"' in shown


def test_links_are_placed_as_one_render_would_place_them(db):
    week = create(db, title="Week 2024-W13", body="")
    dated = create(db, title="Tuesday", body="")
    body = ("[[Tuesday]] [[tuesday]] [[2024-03-27]] [[2024-W13]] [[2024-W14]] "
            "[[2024-02-30]] [[Nowhere & \"quoted\"]] [[Week 2024-W13]]")
    with db.read() as reader:
        placed = saving.place(reader, saving.render(body, "body")).html
        assert placed == entries.render_body(reader, body).html
    assert f"/entries/{dated.id}/tuesday" in placed and f"/entries/{week.id}/" in placed


def imported(db, path, title, body="", aliases=()):
    """An entry as an import makes it: its file's path, its aliases (link keys)."""
    with db.write() as session:
        return entries.create(session, author="import", date="2024-03-20", title=title,
                              body=body, source_path=path, aliases=list(aliases)).id


def test_links_to_imported_files_are_placed_as_resolving_places_them(db):
    root = imported(db, "Note.md", "Note")
    nested = imported(db, "Folder/Note.md", "Note")
    other = imported(db, "Other/Deep/Note.md", "Note")
    aliased = imported(db, "Projects/Plan.md", "Plan", aliases=["the plan", "roadmap"])
    titled = create(db, title="Roadmap", body="").id  # a title is tried before an alias
    targets = ["Note", "NOTE", "note.md", "Folder/Note", "folder/NOTE.md", "/Folder/Note",
               "Deep/Note", "Other/Deep/Note", "Elsewhere/Note", "Note#Heading",
               "Folder/Note#^block", "#Heading", "The Plan", "the plan#Goals", "Roadmap",
               "Projects/Plan", "Plan", "Nowhere", "2024-03-20", "2024-W12"]
    body = " ".join(f"[[{t}]]" for t in targets)
    with db.read() as reader:
        one_by_one = entries.resolver(reader)
        assert saving.resolve_many(reader, targets) == {t: one_by_one(t) for t in targets}
        assert saving.place(reader, saving.render(body, "body")).html == \
            entries.render_body(reader, body).html
        found = {t: entries.resolve(reader, t) for t in targets}
    assert {t: e.id for t, e in found.items() if e is not None} == {
        "Note": root, "NOTE": root, "note.md": root, "Folder/Note": nested,
        "folder/NOTE.md": nested, "/Folder/Note": nested, "Deep/Note": other,
        "Other/Deep/Note": other, "Note#Heading": root, "Folder/Note#^block": nested,
        "The Plan": aliased, "the plan#Goals": aliased, "Roadmap": titled,
        "Projects/Plan": aliased, "Plan": aliased, "2024-03-20": root}


def test_an_editor_save_keeps_an_imported_notes_path_aliases_and_body_tags(db):
    note = imported(db, "Folder/Note.md", "Note", "about #gpu", aliases=["nickname"])
    embedder = create(db, title="Reader", body="![[Folder/Note]] and [[nickname]]").id
    renamed = prepare_update(db, note, {"title": "Renamed", "body": "now #tpu"}, 1)
    with db.write() as session:
        saving.commit(session, renamed, author="me")
    with db.read() as reader:
        saved = entries.get(reader, note)
        assert (saved.source_path, saved.title, saved.body_tags) == \
            ("Folder/Note.md", "Renamed", "tpu")
        assert entries.alias_keys(reader, note) == ["nickname"]
        shown = entries.get(reader, embedder).body_html
        assert "now" in shown and f"/entries/{note}/renamed" in shown
        assert shown == entries.render_body(reader, entries.get(reader, embedder).body_md).html
