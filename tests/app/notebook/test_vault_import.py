"""A folder of markdown as people keep one (an Obsidian vault) in and out, rule by rule,
on small vaults written here: one entry per file, found again by its path; links that
resolve as Obsidian resolves them, backlinks with them; other files as attachments; a
hostile file fails alone; the export reads back as the same notebook. Both imports (in
bulk, and a save per file) answer alike."""

from __future__ import annotations

import os
import re
import sqlite3

import feedparser
import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from app import cli
from app.models import Attachment, Entry, Revision
from app.notebook import attachments, browse, entries, mirror, transfer, vault

PNG = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000"
                    "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082")
IMPORTS = {"bulk": lambda db, folder: transfer.import_folder(db, folder, workers=0),
           "slow": transfer.import_folder_slowly}


def write(folder, name, text: str | bytes):
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def by_title(db) -> dict[str, Entry]:
    with db.read() as session:
        found = session.scalars(sa.select(Entry)).all()
        session.expunge_all()
    return {e.title: e for e in found}


def linked(html: str) -> list[tuple[str, str]]:
    """(class, href) of each wiki link in stored HTML."""
    return re.findall(r'<a class="(wikilink[^"]*)" href="([^"]*)"', html)


def vault_of_namesakes(folder):
    write(folder, "Projects/Plan.md", "the project plan")
    write(folder, "Archive/2023/Plan.md", "last year's plan")
    write(folder, "People/Ada.md", "---\naliases: [Countess, The Enchantress]\n---\nAda")
    write(folder, "Index.md", "[[Plan]] [[2023/Plan]] [[ARCHIVE/2023/plan]] [[Countess]] "
                              "[[people/ada.md]] [[Nobody]]")
    write(folder, "2024-01-01 a.md", "no title, no front matter")
    write(folder, "2024-01-01 b.md", "the same day, no title either")


@pytest.mark.parametrize("way", IMPORTS)
def test_every_file_is_one_entry_and_links_resolve_as_obsidian_resolves_them(
        tmp_path, make_app, way):
    folder = tmp_path / "vault"
    vault_of_namesakes(folder)
    db = make_app().extensions["db"]
    report = IMPORTS[way](db, folder)
    assert (report.created, report.updated, report.errors) == (6, 0, [])
    with db.read() as session:
        rows = {e.source_path: e for e in session.scalars(sa.select(Entry))}
        assert sorted(rows) == ["2024-01-01 a.md", "2024-01-01 b.md", "Archive/2023/Plan.md",
                                "Index.md", "People/Ada.md", "Projects/Plan.md"]
        assert [rows[p].title for p in ("Projects/Plan.md", "Archive/2023/Plan.md")] == [
            "Plan", "Plan"]
        url = {path: f"/entries/{e.id}" for path, e in rows.items()}
        links = linked(rows["Index.md"].body_html)
        # [[Plan]]: the shortest path; [[2023/Plan]] and the whole path, case aside: the other
        assert [(cls, "/".join(href.split("/")[:3]) if cls == "wikilink" else href)
                for cls, href in links] == [
            ("wikilink", url["Projects/Plan.md"]), ("wikilink", url["Archive/2023/Plan.md"]),
            ("wikilink", url["Archive/2023/Plan.md"]), ("wikilink", url["People/Ada.md"]),
            ("wikilink", url["People/Ada.md"]), ("wikilink missing", "/entries/new?title=Nobody")]
        # backlinks are the links that resolve to an entry, no more
        for path, count in (("Projects/Plan.md", 1), ("Archive/2023/Plan.md", 1),
                            ("People/Ada.md", 1), ("2024-01-01 a.md", 0)):
            found, total = browse.backlinks(session, rows[path], include_drafts=True, limit=10)
            assert total == count and all(b.source.id == rows["Index.md"].id for b in found)
        keys = browse.reached_by(session, rows["Archive/2023/Plan.md"])
        assert "2023/plan" in keys and "archive/2023/plan" in keys and "plan" not in keys
        # a note typed in the editor reaches them the same way
        typed = entries.create(session, author="x", date="2024-05-01", title="Typed",
                               body="[[2023/Plan]] and [[The Enchantress]]")
        assert ["/".join(href.split("/")[:3]) for _, href in linked(typed.body_html)] == [
            url["Archive/2023/Plan.md"], url["People/Ada.md"]]
        session.rollback()


@pytest.mark.parametrize("way", IMPORTS)
def test_a_second_import_changes_nothing_and_an_edit_updates_that_file_alone(
        tmp_path, make_app, way):
    folder = tmp_path / "vault"
    vault_of_namesakes(folder)
    db = make_app().extensions["db"]
    IMPORTS[way](db, folder)
    again = IMPORTS[way](db, folder)
    assert (again.created, again.updated, again.unchanged) == (0, 0, 6)
    write(folder, "Archive/2023/Plan.md", "last year's plan, revised")
    write(folder, "New.md", "[[Plan]]")
    third = IMPORTS[way](db, folder)
    assert (third.created, third.updated, third.unchanged) == (1, 1, 5)
    with db.read() as session:
        counts = dict(session.execute(sa.select(Entry.source_path, Entry.revision)).all())
        assert session.scalar(sa.select(sa.func.count()).select_from(Revision)) == 8
    assert counts["Archive/2023/Plan.md"] == 2 and counts["Projects/Plan.md"] == 1


def test_a_dry_run_prints_the_plan_and_changes_nothing(tmp_path, data_dir, monkeypatch):
    monkeypatch.setenv("COMMONPLACE_DATA_DIR", str(data_dir))
    monkeypatch.setenv("COMMONPLACE_TIMEZONE", "UTC")
    monkeypatch.delenv("COMMONPLACE_DATABASE_URL", raising=False)
    folder = tmp_path / "vault"
    vault_of_namesakes(folder)
    write(folder, "img/pic.png", PNG)
    runner = CliRunner()
    result = runner.invoke(cli.main, ["import", "--dry-run", str(folder)])
    assert result.exit_code == 0, result.output
    assert "create Archive/2023/Plan.md: entry 'Plan' of" in result.output
    assert "attach img/pic.png (added)" in result.output
    assert "would be: created 6, updated 0, unchanged 0" in result.output
    result = runner.invoke(cli.main, ["import", str(folder)])
    assert "created 6, updated 0" in result.output and "attachments added 1" in result.output
    again = runner.invoke(cli.main, ["import", "--dry-run", str(folder)])
    assert "would be: created 0, updated 0, unchanged 6" in again.output
    assert "create " not in again.output and "attach " not in again.output


# The 382-byte file of the report: a title nine levels of aliases deep ("billion laughs")
ALIAS_BOMB = "---\n" + "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
    for p, c in zip("abcdefgh", "bcdefghi", strict=True)) + "title: *i\n---\nboom\n"


@pytest.mark.parametrize("way", IMPORTS)
def test_hostile_files_fail_alone_and_every_other_file_imports(tmp_path, make_app, way):
    folder = tmp_path / "vault"
    write(folder, "2024-02-01 good.md", "a good note")
    os.mkfifo(folder / "2024-02-01-fifo.md")  # read, it would wait for a writer for ever
    write(folder, "huge.md", "x" * (mirror.MAX_NOTE_BYTES + 1))
    write(folder, "bomb.md", ALIAS_BOMB)
    write(folder, "deep.md", ">" * 5000 + " x")
    write(folder, "also good.md", "[[good]] #fine")
    write(folder, "bell\x07name.md", "a control character in its name")
    db = make_app().extensions["db"]
    report = IMPORTS[way](db, folder)
    titles = by_title(db)
    assert {"2024-02-01 good", "also good", "bomb", "bellname"} <= set(titles)
    assert [w for w in report.warnings if "control characters left out of the title" in w]
    assert [s for s in report.skipped if "2024-02-01-fifo.md: not a regular file" in s]
    assert [e for e in report.errors if "huge.md: " in e and "a note is at most" in e]
    # the alias bomb is not expanded: its front matter is kept as text, and said so
    assert titles["bomb"].body_md == ALIAS_BOMB.rstrip()
    assert [w for w in report.warnings if "bomb.md: front matter not read" in w]
    # the deep one renders, or fails alone, named
    assert "deep" in titles or [e for e in report.errors if "deep.md: " in e]
    assert report.created == len(titles)


@pytest.mark.parametrize("way", IMPORTS)
def test_other_files_become_attachments_found_by_name_and_by_path(tmp_path, make_app,
                                                                 data_dir, way):
    folder = tmp_path / "vault"
    write(folder, "Attachments/pic.png", PNG)
    write(folder, "Deep/er/pic.png", PNG)  # the same content: stored once
    write(folder, "Deep/Pic Two.png", PNG + b"\0")
    write(folder, "Deep/program.bin", b"\x00\x01\x02 binary")
    write(folder, "note.md", "![[pic.png]] ![[Deep/er/pic.png]]")
    db = make_app().extensions["db"]
    report = IMPORTS[way](db, folder)
    assert report.attachments == {"added": 3}
    assert [s for s in report.skipped if "program.bin: not a kind of file kept" in s]
    stored = list((data_dir / "attachments").rglob("*"))
    assert len([p for p in stored if p.is_file() and p.parent.name != "tmp"]) == 2
    with db.read() as session:
        assert attachments.find(session, "pic.png").path == "Attachments/pic.png"
        assert attachments.find(session, "deep/ER/pic.png").path == "Deep/er/pic.png"
        assert attachments.find(session, "pic two.png").path == "Deep/Pic Two.png"
        assert attachments.find(session, "nothing.png") is None
        url = attachments.resolver(session)("Pic Two.png")
        assert url.startswith("/attachments/") and url.endswith("/Pic-Two.png")
        # an import's renderers find them from memory, alike
        in_memory, asked = attachments.Index(session), attachments.resolver(session)
        for name in ("pic.png", "PIC.png", "er/pic.png", "Deep/Pic Two.png", "none.png"):
            assert in_memory.url(name) == asked(name), name
    again = IMPORTS[way](db, folder)
    assert again.attachments == {"unchanged": 3}
    write(folder, "Deep/Pic Two.png", PNG + b"\1")
    assert IMPORTS[way](db, folder).attachments == {"unchanged": 2, "updated": 1}


def test_an_export_is_a_vault_that_imports_back_as_the_same_notebook(tmp_path, make_app):
    folder = tmp_path / "vault"
    vault_of_namesakes(folder)
    write(folder, "Attachments/pic.png", PNG)
    write(folder, "Projects/Plan.md", "---\ntags: [work]\ncssclasses: [wide]\nrating: 5\n---\n"
          "the plan ![[pic.png]] #later")
    app = make_app()
    db = app.extensions["db"]
    transfer.import_folder(db, folder, workers=0)
    with db.write() as session:
        entries.create(session, author="x", date="2024-03-01", title="Why: a/b?",
                       body="written here, to [[Plan]]", tags=["ml"], status="draft")
        entries.create(session, author="x", date="2024-03-02", title="Why: a/b?", body="again")
    out = tmp_path / "out"
    assert vault.export_vault(db, out) == (8, 1)
    names = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert names == ["2024-01-01 a.md", "2024-01-01 b.md", "Archive/2023/Plan.md",
                     "Attachments/pic.png", "Index.md", "People/Ada.md", "Projects/Plan.md",
                     "Why a b 2.md", "Why a b.md"]
    back = make_app(DATA_DIR=tmp_path / "back",
                    DATABASE_URL=f"sqlite:///{tmp_path / 'back'}/commonplace.db")
    report = transfer.import_folder(back.extensions["db"], out, workers=0)
    assert (report.created, report.errors, report.attachments) == (8, [], {"added": 1})

    def notebook(db):
        with db.read() as session:
            rows = session.scalars(sa.select(Entry)).all()
            ids = {e.id: (e.title, e.date) for e in rows}
            return sorted(
                (e.kind, e.title, e.date, e.tags, e.status, e.body_md, e.front_matter,
                 tuple(ids.get(int(h.split("/")[2])) if c == "wikilink" else h
                       for c, h in linked(e.body_html)),
                 tuple(sorted(entries.alias_keys(session, e.id)))) for e in rows), sorted(
                (a.path, a.sha256) for a in session.scalars(sa.select(Attachment)))

    assert notebook(back.extensions["db"]) == notebook(db)
    assert "cssclasses:\n- wide\nrating: 5\n" in (out / "Projects/Plan.md").read_text()


def test_an_export_writes_notes_whose_names_are_long_in_bytes(tmp_path, make_app):
    """A file name is at most 255 bytes: an imported one near that, and a title of 120 CJK
    characters (360 bytes), are written all the same, and read back as the same notes."""
    folder = tmp_path / "vault"
    write(folder, "x" * 250 + ".md", "a long file name")
    db = make_app().extensions["db"]
    transfer.import_folder(db, folder, workers=0)
    with db.write() as session:
        entries.create(session, author="x", date="2024-03-01", title="\u6587" * 120,
                       body="long in bytes")
    out = tmp_path / "out"
    assert vault.export_vault(db, out) == (2, 0)
    assert sorted(p.name for p in out.rglob("*.md")) == ["x" * 250 + ".md",
                                                         "\u6587" * 66 + ".md"]
    report = transfer.import_folder(db, out, workers=0)
    assert (report.created, report.updated, report.unchanged, report.errors) == (0, 0, 2, [])


@pytest.mark.parametrize("way", IMPORTS)
def test_an_export_imported_into_its_own_notebook_changes_nothing(tmp_path, make_app, way):
    """Entries written here have no file: the export names each in its front matter
    (`commonplace-id`), and importing it back finds them, so nothing doubles."""
    folder = tmp_path / "vault"
    vault_of_namesakes(folder)
    db = make_app().extensions["db"]
    transfer.import_folder(db, folder, workers=0)
    with db.write() as session:
        for day in ("2024-03-01", "2024-03-02"):
            entries.create(session, author="x", date=day, title="Why: a/b?", body="[[Plan]]")
        entries.create(session, author="x", date="2024-03-04", title="Week", kind="week",
                       body="the letter")
    out = tmp_path / "out"
    vault.export_vault(db, out)
    assert "commonplace-id:" in (out / "Why a b 2.md").read_text()

    def state():
        with db.read() as session:
            return (sorted((e.id, e.title, e.revision, e.body_html)
                           for e in session.scalars(sa.select(Entry))),
                    session.scalar(sa.select(sa.func.count()).select_from(Revision)))

    before = state()
    report = IMPORTS[way](db, out)
    assert (report.created, report.updated, report.errors) == (0, 0, [])
    assert report.unchanged == len(before[0])
    assert state() == before
    # an edit made in the exported file updates its entry, and only that one
    path = out / "Why a b 2.md"
    path.write_text(path.read_text().replace("[[Plan]]", "[[Plan]] edited"))
    report = IMPORTS[way](db, out)
    assert (report.created, report.updated) == (0, 1)


@pytest.mark.parametrize("way", IMPORTS)
def test_front_matter_the_notebook_has_no_field_for_is_kept_and_written_back(
        tmp_path, make_app, way):
    folder = tmp_path / "vault"
    write(folder, "Note.md", "---\ntitle: Note\ncssclasses: [wide]\nsource: "
          "https://x.test\ncreated: 2024-01-02\n---\nbody")
    app = make_app()
    db = app.extensions["db"]
    IMPORTS[way](db, folder)
    kept = "cssclasses:\n- wide\nsource: https://x.test\ncreated: 2024-01-02\n"
    with db.read() as session:
        entry = session.scalars(sa.select(Entry)).one()
        assert (entry.front_matter, entry.date.isoformat()) == (kept, "2024-01-02")
        assert kept in mirror.to_text(entry)
        entry_id = entry.id
    assert IMPORTS[way](db, folder).unchanged == 1
    with db.write() as session:  # a save from the editor keeps them
        entry = session.get(Entry, entry_id)
        entries.update(session, entry, {"body": "edited"}, base_revision=entry.revision,
                       author="x")
    mirror.write_queued(session)
    written = next((app.config["DATA_DIR"] / "notes").rglob("*.md")).read_text()
    assert kept in written and "edited" in written
    out = tmp_path / "out"
    vault.export_vault(db, out)
    assert kept in (out / "Note.md").read_text()
    write(folder, "Note.md", "---\ntitle: Note\ncssclasses: [narrow]\n---\nedited")
    assert IMPORTS[way](db, folder).updated == 1
    with db.read() as session:
        assert session.get(Entry, entry_id).front_matter == "cssclasses:\n- narrow\n"


def test_a_tag_written_in_the_text_is_a_tag_everywhere(client, db):
    """Entry page, week list, API, feed and search show a #tag of the text as they show the
    tags field's; the field itself (what the edit form and the mirror file hold) keeps only
    what was typed there."""
    made = client.post("/api/v1/entries", json={
        "title": "Zero bubble", "date": "2024-03-27", "tags": ["ml"],
        "body": "A schedule with #zero bubbles, #ml again"}).get_json()
    assert made["tags"] == ["ml", "zero"]
    assert client.get(f"/api/v1/entries/{made['id']}").get_json()["tags"] == ["ml", "zero"]
    listed = client.get("/api/v1/entries").get_json()
    rows = listed["entries"] if isinstance(listed, dict) else listed
    assert [e["tags"] for e in rows if e["id"] == made["id"]] == [["ml", "zero"]]
    page = client.get(made["url"]).text
    assert 'href="/tags/zero">#zero</a></li>' in page
    week = client.get("/weeks/2024-W13").text
    assert 'href="/tags/zero">#zero</a>' in week
    found = client.get("/api/v1/search?q=tag:zero").get_json()
    assert [h["tags"] for h in found["results"]] == [["ml", "zero"]]
    feed = feedparser.parse(client.get("/feed.atom").data)
    assert [t.term for t in feed.entries[0].tags] == ["ml", "zero"]
    with db.read() as session:
        entry = session.get(Entry, made["id"])
        assert (entry.tags, entry.body_tags) == ("ml", "zero")
        assert "tags: [ml]" in mirror.to_text(entry)


def test_the_notebooks_own_mirror_imports_back_into_it_unchanged(db, data_dir):
    """Entries written here have no file of their own: the mirror's file of one (its
    mirror.relpath) is that entry, so importing the mirror changes nothing, and two
    entries of one title and day stay two."""
    with db.write() as session:
        for body in ("first", "second"):
            entries.create(session, author="x", date="2024-03-01", title="Same", body=body)
        entries.create(session, author="x", date="2024-03-02", title="Other",
                       body="[[Same]] #tagged")
    mirror.write_queued(session)
    notes = data_dir / "notes"
    assert sorted(p.name for p in notes.rglob("*.md")) == [
        "2024-03-01-same-2.md", "2024-03-01-same.md", "2024-03-02-other.md"]
    report = transfer.import_folder(db, notes, workers=0)
    assert (report.created, report.updated, report.unchanged) == (0, 0, 3)
    write(notes, "2024/2024-03-01-same-2.md",
          (notes / "2024" / "2024-03-01-same-2.md").read_text().replace("second", "2nd"))
    report = transfer.import_folder(db, notes, workers=0)
    assert (report.created, report.updated, report.unchanged) == (0, 1, 2)
    with db.read() as session:
        rows = sorted(session.execute(sa.select(Entry.title, Entry.body_md, Entry.source_path)))
    assert rows == [("Other", "[[Same]] #tagged", None), ("Same", "2nd", None),
                    ("Same", "first", None)]


def test_migration_0013_keeps_the_text_tags_and_cuts_links_to_their_page(tmp_path):
    from app import upgrades
    from tests.helpers import OLD_ENTRY, at_revision

    db, _ = at_revision(tmp_path, "0012")
    with sqlite3.connect(db.sqlite_path) as conn:  # a notebook as 0012 left it
        conn.executemany(OLD_ENTRY, [(1, "published"), (2, "published")])
        conn.execute("UPDATE entry SET title_key = 'old'")
        conn.execute("UPDATE entry SET tags = 'ml' WHERE id = 1")
        conn.executemany("INSERT INTO entry_tag (entry_id, tag) VALUES (?, ?)",
                         [(1, "ml"), (1, "zero"), (1, "alpha"), (2, "solo")])
        conn.executemany("INSERT INTO link (source_id, target_key, text, context) VALUES "
                         "(?, ?, '', '')", [(1, "old"), (2, "old #notes"), (2, "#top")])
    upgrades.upgrade(db, tmp_path / "backups")
    with sqlite3.connect(db.sqlite_path) as conn:
        assert conn.execute("SELECT id, tags, body_tags, source_path FROM entry "
                            "ORDER BY id").fetchall() == [(1, "ml", "alpha zero", None),
                                                          (2, "", "solo", None)]
        assert [k for (k,) in conn.execute("SELECT target_key FROM link ORDER BY id")] == [
            "old", "old", ""]
    with db.read() as session:
        first, newest = session.get(Entry, 1), session.get(Entry, 2)  # both titled "Old"
        assert browse.reached_by(session, first) == ["2024-01-01"]
        assert browse.backlinks(session, newest, include_drafts=True, limit=5)[1] == 1
        assert newest.all_tags == ["solo"]
