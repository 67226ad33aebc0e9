"""Plain files both ways: the markdown mirror written on every save (after the commit, and
only if it commits), import and export of whole folders, and the CLI's import and export."""

import datetime as dt
import os
from pathlib import Path

import sqlalchemy as sa
import yaml
from click.testing import CliRunner

from app import cli
from app.models import Entry
from app.notebook import entries, letters, mirror, transfer

# -- the mirror ---------------------------------------------------------------------------


def test_every_save_writes_the_mirror_file_and_moves_it_on_rename(db, data_dir):
    with db.write() as session:
        entry = entries.create(session, author="x", date="2024-03-31", title="Working notes",
                               body="Hello [[World]]", tags=["ml"])
    mirror.write_queued(session)
    path = data_dir / "notes" / "2024" / "2024-03-31-working-notes.md"
    text = path.read_text()
    front, body = text.split("---\n")[1], text.split("---\n", 2)[2]
    assert yaml.safe_load(front) == {"title": "Working notes", "date": dt.date(2024, 3, 31),
                                     "tags": ["ml"], "status": "published"}
    assert body == "Hello [[World]]\n"
    with db.write() as session:
        entries.update(session, entries.get(session, entry.id), {"title": "Renamed"},
                       base_revision=1, author="x")
    mirror.write_queued(session)
    assert not path.exists()
    assert (data_dir / "notes" / "2024" / "2024-03-31-renamed.md").exists()
    with db.write() as session:
        entries.delete(session, entries.get(session, entry.id))
    mirror.write_queued(session)
    assert list((data_dir / "notes").rglob("*.md")) == []
    assert [p for p in (data_dir / "notes").rglob("*") if p.name.endswith(".tmp")] == []


def test_letters_are_mirrored_by_week(db, data_dir):
    with db.write() as session:
        letters.ensure_letter(session, "2025-W01", "x")  # ISO year 2025 starts in Dec 2024
    mirror.write_queued(session)
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


def test_a_save_over_the_api_writes_its_file_once_committed(client, data_dir):
    made = client.post("/api/v1/entries", json={"date": "2024-03-31", "title": "Via API",
                                                "body": "text"})
    assert made.status_code == 201
    path = data_dir / "notes" / "2024" / "2024-03-31-via-api.md"
    assert path.read_text().endswith("---\ntext\n")
    refused = client.put(f"/api/v1/entries/{made.json['id']}",
                         json={"base_revision": 1, "title": ""})
    assert refused.status_code == 422 and path.exists()


# -- import and export --------------------------------------------------------------------


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
    assert transfer.mirror_folder(db, out) == 4
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


def test_any_markdown_file_imports_titled_by_its_name_and_dated_as_it_can_be(tmp_path,
                                                                             make_app):
    """Nothing is refused for what it lacks: the title is the file's name, the date its
    front matter's, else one in its name, else its last change's; front matter that cannot
    be read stays in the text, and the report says so."""
    source = tmp_path / "plain"
    write(source, "2023-12-01 standup.md", "# Standup notes\n\nsaid things\n")
    write(source, "2023-12-02.md", "no heading here\n")
    readme = write(source, "notes/readme.md", "no date anywhere\n")
    os.utime(readme, (0, dt.datetime(2021, 6, 7, 12).timestamp()))
    write(source, "Meeting 2022-02-03 notes.md", "---\ncreated: 2020-01-02T10:11\n---\nx\n")
    write(source, "2023-12-03-bad.md", "---\ntitle: [unclosed\n---\nx\n")
    write(source, ".hidden/2023-12-04-x.md", "ignored\n")
    db = make_app().extensions["db"]
    report = transfer.import_folder(db, source)
    assert (report.created, report.errors) == (5, [])
    assert [Path(w.split(":")[0]).name for w in report.warnings] == ["2023-12-03-bad.md"]
    with db.read() as session:
        rows = {e.title: (e.date.isoformat(), e.body_md, e.source_path)
                for e in session.scalars(sa.select(Entry))}
    assert rows == {
        "2023-12-01 standup": ("2023-12-01", "# Standup notes\n\nsaid things",
                               "2023-12-01 standup.md"),
        "2023-12-02": ("2023-12-02", "no heading here", "2023-12-02.md"),
        "readme": ("2021-06-07", "no date anywhere", "notes/readme.md"),
        "Meeting 2022-02-03 notes": ("2020-01-02", "x", "Meeting 2022-02-03 notes.md"),
        "2023-12-03-bad": ("2023-12-03", "---\ntitle: [unclosed\n---\nx", "2023-12-03-bad.md"),
    }


def test_import_skips_symbolic_links_and_says_so(tmp_path, make_app):
    outside = tmp_path / "elsewhere"
    write(outside, "secret.md", "---\ntitle: Private key notes\n---\nnot for the notebook\n")
    source = tmp_path / "notes"
    write(source, "2024/Real.md", "# Real\n\nmine\n")
    (source / "2024" / "2024-01-02-innocent.md").symlink_to(outside / "secret.md")
    (source / "linked-folder").symlink_to(outside, target_is_directory=True)
    db = make_app().extensions["db"]
    report = transfer.import_folder(db, source)
    assert report.created == 1 and report.errors == []
    assert sorted(Path(s.split(":")[0]).name for s in report.skipped) == [
        "2024-01-02-innocent.md", "linked-folder"]
    with db.read() as session:
        assert [e.title for e in session.scalars(sa.select(Entry))] == ["Real"]


def test_cli_import_export_and_token(tmp_path, data_dir, monkeypatch):
    monkeypatch.setenv("COMMONPLACE_DATA_DIR", str(data_dir))
    monkeypatch.setenv("COMMONPLACE_TIMEZONE", "UTC")
    monkeypatch.delenv("COMMONPLACE_DATABASE_URL", raising=False)
    source = tmp_path / "src"
    write(source, "2024-01-02-a.md", "---\ntitle: A\n---\nbody\n")
    runner = CliRunner()
    result = runner.invoke(cli.main, ["import", str(source)])
    assert result.exit_code == 0, result.output
    assert "created 1" in result.output and "skipped 0" in result.output
    assert "entries/s" in result.output
    result = runner.invoke(cli.main, ["export", str(tmp_path / "dst")])
    assert result.exit_code == 0 and "exported 1 entries" in result.output
    assert (tmp_path / "dst" / "2024-01-02-a.md").exists()
    result = runner.invoke(cli.main, ["token", "create", "phone", "--role", "feed"])
    assert result.exit_code == 0 and result.output.strip().startswith("cp_")
    assert "phone\tfeed\tactive" in runner.invoke(cli.main, ["token", "list"]).output
    assert runner.invoke(cli.main, ["token", "create", "phone"]).exit_code != 0
    assert runner.invoke(cli.main, ["token", "revoke", "phone"]).exit_code == 0
    assert runner.invoke(cli.main, ["token", "revoke", "nobody"]).exit_code != 0
    bad = runner.invoke(cli.main, ["import", str(tmp_path / "missing")])
    assert bad.exit_code != 0
