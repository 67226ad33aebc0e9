"""A vault from a Mac: its file names are decomposed (NFD, "e" and an accent), the links typed
in it composed (NFC, one character). Obsidian takes them for the same names; so does the
import, and so do notebooks that imported such a vault before (migration 0018)."""

from __future__ import annotations

import sqlite3
import unicodedata

import pytest
import sqlalchemy as sa

from app.models import Attachment, Entry
from app.notebook import attachments, browse
from tests.app.notebook.test_vault_import import IMPORTS, PNG, linked, write


def nfd(text: str) -> str:
    return unicodedata.normalize("NFD", text)


def mac_vault(folder):
    write(folder, nfd("Café notes.md"), "espresso")
    write(folder, nfd("Sub/Café notes.md"), "in a folder")
    write(folder, nfd("Résumé.png"), PNG)
    write(folder, "Index.md", "[[Café notes]] [[Sub/Café notes]] ![[Résumé.png]]")


@pytest.mark.parametrize("way", IMPORTS)
def test_a_mac_vaults_decomposed_names_are_reached_by_links_typed_composed(
        tmp_path, make_app, way):
    folder = tmp_path / "vault"
    mac_vault(folder)
    assert any(name == nfd("Café notes.md") for name in (p.name for p in folder.iterdir()))
    db = make_app().extensions["db"]
    report = IMPORTS[way](db, folder)
    assert (report.created, report.errors) == (3, [])
    with db.read() as session:
        rows = {e.source_path: e for e in session.scalars(sa.select(Entry))}
        assert sorted(rows) == ["Café notes.md", "Index.md", "Sub/Café notes.md"]
        assert rows["Café notes.md"].title == "Café notes"  # composed, as typed
        links = linked(rows["Index.md"].body_html)
        assert [(cls, "/".join(href.split("/")[:3])) for cls, href in links] == [
            ("wikilink", f"/entries/{rows['Café notes.md'].id}"),
            ("wikilink", f"/entries/{rows['Sub/Café notes.md'].id}")]
        assert 'src="/attachments/' in rows["Index.md"].body_html
        assert attachments.find(session, "Résumé.png").path == "Résumé.png"
        assert attachments.find(session, nfd("résumé.PNG")).path == "Résumé.png"
        assert browse.backlinks(session, rows["Café notes.md"], include_drafts=True,
                                limit=5)[1] == 1
    # imported again, each file is found again: nothing new, nothing changed
    again = IMPORTS[way](db, folder)
    assert (again.created, again.updated, again.unchanged, again.errors) == (0, 0, 3, [])
    assert again.attachments == {"unchanged": 1}


def test_migration_0018_composes_the_keys_and_paths_an_older_import_stored(tmp_path):
    from app import upgrades
    from tests.helpers import OLD_ENTRY, at_revision

    db, migrate = at_revision(tmp_path, "0017")
    cafe = nfd("Café notes")
    with sqlite3.connect(db.sqlite_path) as conn:  # as a Mac vault's import left it
        conn.executemany(OLD_ENTRY, [(1, "published"), (2, "published")])
        conn.execute("UPDATE entry SET title = ?, title_key = ?, name_key = ?, source_path = ? "
                     "WHERE id = 1", (cafe, cafe.lower(), cafe.lower(), cafe + ".md"))
        conn.execute("UPDATE entry SET title = 'Index', body_md = ? WHERE id = 2",
                     ("[[Café notes]]",))
        conn.execute("INSERT INTO entry_alias (entry_id, key) VALUES (1, ?), (1, 'café')",
                     (nfd("café"),))
        conn.execute("INSERT INTO link (source_id, target_key, text, context) VALUES "
                     "(2, ?, '', '')", (nfd("café notes"),))
        conn.execute("INSERT INTO attachment (sha256, filename, path, name_key, content_type, "
                     "size, created_at) VALUES ('ab', 'x.png', ?, ?, 'image/png', 1, "
                     "'2024-01-01 00:00:00')", (nfd("Résumé.png"), nfd("résumé.png")))
        conn.execute("INSERT INTO setting (key, value) VALUES ('render_version', '1')")
        conn.execute("INSERT INTO entry_fts (rowid, title, tags, body, kind) VALUES "
                     "(1, ?, '', '', '')", (cafe,))
    upgrades.upgrade(db, tmp_path / "backups")
    with sqlite3.connect(db.sqlite_path) as conn:
        assert conn.execute("SELECT title, title_key, name_key, source_path FROM entry "
                            "WHERE id = 1").fetchone() == (
            "Café notes", "café notes", "café notes", "Café notes.md")
        assert conn.execute("SELECT title FROM entry_fts WHERE rowid = 1").fetchone() == (
            "Café notes",)
        assert conn.execute("SELECT key FROM entry_alias").fetchall() == [("café",)]
        assert conn.execute("SELECT target_key FROM link").fetchall() == [("café notes",)]
        assert conn.execute("SELECT path, name_key FROM attachment").fetchone() == (
            "Résumé.png", "résumé.png")
        # the stored HTML is rendered again at the next start, the links resolved
        assert conn.execute("SELECT count(*) FROM setting WHERE key = 'render_version'"
                            ).fetchone() == (0,)
    with db.read() as session:
        cafe_entry = session.get(Entry, 1)
        assert browse.backlinks(session, cafe_entry, include_drafts=True, limit=5)[1] == 1
        assert session.scalar(sa.select(Attachment.id)) == attachments.find(
            session, "Résumé.png").id
    from alembic import command

    migrate(command.downgrade, "0017")  # changes nothing: the composed keys stay readable
    with sqlite3.connect(db.sqlite_path) as conn:
        assert conn.execute("SELECT title_key FROM entry WHERE id = 1").fetchone() == (
            "café notes",)
