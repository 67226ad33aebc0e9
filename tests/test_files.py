"""Plain files both ways: the mirror written on every save, import and export."""

import datetime as dt

import feedparser
import sqlalchemy as sa
import yaml

from app.cli import main
from app.models import Entry
from app.notebook import entries, letters, transfer


def test_every_save_writes_the_mirror_file_and_moves_it_on_rename(db, data_dir):
    with db.write() as session:
        entry = entries.create(session, author="x", date="2024-03-31", title="Working notes",
                               body="Hello [[World]]", tags=["ml"])
    path = data_dir / "notes" / "2024" / "2024-03-31-working-notes.md"
    text = path.read_text()
    front, body = text.split("---\n")[1], text.split("---\n", 2)[2]
    assert yaml.safe_load(front) == {"title": "Working notes", "date": dt.date(2024, 3, 31),
                                     "tags": ["ml"], "status": "published"}
    assert body == "Hello [[World]]\n"
    with db.write() as session:
        entries.update(session, entries.get(session, entry.id), {"title": "Renamed"},
                       base_revision=1, author="x")
    assert not path.exists()
    assert (data_dir / "notes" / "2024" / "2024-03-31-renamed.md").exists()
    with db.write() as session:
        entries.delete(session, entries.get(session, entry.id))
    assert list((data_dir / "notes").rglob("*.md")) == []
    assert [p for p in (data_dir / "notes").rglob("*") if p.name.endswith(".tmp")] == []


def test_letters_are_mirrored_by_week(db, data_dir):
    with db.write() as session:
        letters.ensure_letter(session, "2025-W01", "x")  # ISO year 2025 starts in Dec 2024
    text = (data_dir / "notes" / "2025" / "2025-W01.md").read_text()
    assert "kind: week" in text and "week: 2025-W01" in text


def test_a_rolled_back_save_writes_no_file(db, data_dir):
    try:
        with db.write() as session:
            entries.create(session, author="x", date="2024-03-31", title="Never")
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    assert not list((data_dir / "notes").rglob("*.md"))


def write(folder, name, text):
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_import_then_export_reproduces_the_entries(tmp_path, make_app):
    source = tmp_path / "in"
    write(source, "2024/2024-03-31-working-notes.md",
          "---\ntitle: Working notes\ndate: 2024-03-31\ntags: [ml, gpu]\nstatus: published\n"
          "---\nBody with [[Links]] and #hashtag\n")
    write(source, "2024/2024-W13.md",
          "---\ntitle: Week 2024-W13\ndate: 2024-03-25\nkind: week\nweek: 2024-W13\ntags: []\n"
          "status: published\n---\n## Notes\n\nsomething\n")
    write(source, "2024/2024-04-01-a-draft.md",
          "---\ntitle: A draft\ndate: 2024-04-01\ntags: []\nstatus: draft\n---\nunfinished\n")
    write(source, "2024/2024-04-02-old-name.md", "---\ntitle: New name\ndate: 2024-04-02\n"
          "tags: []\nstatus: published\n---\nrenamed since\n")
    app = make_app()
    db = app.extensions["db"]
    report = transfer.import_folder(db, source)
    assert (report.created, report.updated, report.unchanged, report.errors) == (4, 0, 0, [])
    out = tmp_path / "out"
    assert transfer.export_folder(db, out) == 4
    renamed = source / "2024" / "2024-04-02-old-name.md"
    for path in source.rglob("*.md"):
        if path != renamed:
            assert (out / path.relative_to(source)).read_text() == path.read_text()
    # an entry's file is named after its title; its content is the same
    assert (out / "2024" / "2024-04-02-new-name.md").read_text() == renamed.read_text()
    # importing the same folder again changes nothing
    again = transfer.import_folder(db, source)
    assert (again.created, again.updated, again.unchanged) == (0, 0, 4)
    # a changed file becomes a new revision of the same entry
    write(source, "2024/2024-04-01-a-draft.md",
          "---\ntitle: A draft\ndate: 2024-04-01\ntags: []\nstatus: draft\n---\nfinished\n")
    third = transfer.import_folder(db, source)
    assert (third.created, third.updated, third.unchanged) == (0, 1, 3)
    with db.read() as session:
        draft = session.scalar(sa.select(Entry).where(Entry.title == "A draft"))
        assert (draft.body_md, draft.revision) == ("finished", 2)


def test_plain_dated_files_import_with_date_from_the_name(tmp_path, make_app):
    source = tmp_path / "plain"
    write(source, "2023-12-01 standup.md", "# Standup notes\n\nsaid things\n")
    write(source, "2023-12-02.md", "no heading here\n")
    write(source, "notes/readme.md", "no date anywhere\n")
    write(source, "2023-12-03-bad.md", "---\ntitle: [unclosed\n---\nx\n")
    write(source, ".hidden/2023-12-04-x.md", "ignored\n")
    db = make_app().extensions["db"]
    report = transfer.import_folder(db, source)
    assert report.created == 2 and len(report.errors) == 2
    with db.read() as session:
        rows = {e.date.isoformat(): e.title for e in session.scalars(sa.select(Entry))}
    assert rows == {"2023-12-01": "Standup notes", "2023-12-02": "2023-12-02"}


def test_cli_import_export_and_token(tmp_path, data_dir, monkeypatch):
    from click.testing import CliRunner

    monkeypatch.setenv("COMMONPLACE_DATA_DIR", str(data_dir))
    monkeypatch.setenv("COMMONPLACE_TIMEZONE", "UTC")
    monkeypatch.delenv("COMMONPLACE_DATABASE_URL", raising=False)
    source = tmp_path / "src"
    write(source, "2024-01-02-a.md", "---\ntitle: A\n---\nbody\n")
    runner = CliRunner()
    result = runner.invoke(main, ["import", str(source)])
    assert result.exit_code == 0, result.output
    assert "created 1" in result.output
    result = runner.invoke(main, ["export", str(tmp_path / "dst")])
    assert result.exit_code == 0 and "exported 1" in result.output
    result = runner.invoke(main, ["token", "create", "phone", "--role", "feed"])
    assert result.exit_code == 0 and result.output.strip().startswith("cp_")
    assert "phone\tfeed\tactive" in runner.invoke(main, ["token", "list"]).output
    assert runner.invoke(main, ["token", "create", "phone"]).exit_code != 0
    assert runner.invoke(main, ["token", "revoke", "phone"]).exit_code == 0
    assert runner.invoke(main, ["token", "revoke", "nobody"]).exit_code != 0
    bad = runner.invoke(main, ["import", str(tmp_path / "missing")])
    assert bad.exit_code != 0


def test_upgrade_backs_up_an_existing_database_first(tmp_path):
    import sqlite3

    from app import db as dbmod

    path = tmp_path / "old.db"
    with sqlite3.connect(path) as conn:  # a file with data that predates the migrations
        conn.execute("CREATE TABLE precious (v TEXT)")
        conn.execute("INSERT INTO precious VALUES ('keep me')")
    database = dbmod.Database(f"sqlite:///{path}")
    assert dbmod.pending_migrations(database)[-1] == "0001"  # all of them, oldest last
    backup = dbmod.upgrade(database, tmp_path / "backups")
    assert backup is not None and backup.parent == tmp_path / "backups"
    with sqlite3.connect(backup) as conn:
        assert conn.execute("SELECT v FROM precious").fetchall() == [("keep me",)]
        assert "entry" not in {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    assert dbmod.pending_migrations(database) == []
    assert dbmod.upgrade(database, tmp_path / "backups") is None  # nothing pending, no backup
    # a brand-new database has nothing to save
    fresh = dbmod.Database(f"sqlite:///{tmp_path / 'new.db'}")
    assert dbmod.upgrade(fresh, tmp_path / "backups2") is None
    assert not (tmp_path / "backups2").exists()


def test_sqlite_runs_in_wal_with_foreign_keys(db):
    with db.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() >= 5000


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
