"""Backups you have restored (app/backups.py): an archive of everything — the database
copied online, attachments, run logs and artifacts — checked member by member, refused
whole when corrupt or truncated, restored into a fresh data directory identical to what
was backed up, and an archive from an older schema restores and migrates."""

import contextlib
import datetime as dt
import gzip
import hashlib
import io
import sqlite3
import stat
import tarfile
from pathlib import Path

import pytest
from alembic import command

from app import backups, upgrades
from app import db as dbmod
from app.journal import posting, run_files, runs
from app.notebook import attachments, entries
from tests.helpers import SMALL, add_token

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(200))


def fill(app) -> dict:
    """Entries with revisions, tags and links, an attachment, and a finished run with its
    log, an artifact and its card in the letter."""
    db, data_dir = app.extensions["db"], Path(app.config["DATA_DIR"])
    with db.write() as session:
        first = entries.create(session, author="me", date="2024-03-25", title="Ring",
                               body="all-reduce #comm", tags=["gpu"])
        entries.update(session, first, {"body": "all-reduce, ring #comm"}, base_revision=1,
                       author="me")
        second = entries.create(session, author="me", date="2024-03-26", title="Tree",
                                body="see [[Ring]]")
        attachments.store(session, data_dir, second, io.BytesIO(PNG), "chart.png")
        run = runs.create(session, "data_parallel", SMALL, actor="me")
        run.status, run.finished_at, run.result = "SUCCEEDED", dt.datetime(2024, 3, 27), {}
        run_files.append_log(data_dir, session, run, 0, "progress step=1 total=1\nfinished\n")
        run_files.store_artifact(data_dir, session, run, "events.jsonl", b'{"t0": 1}\n')
    posting.post_cards(db, "UTC")
    return {"entries": 3}


def table_rows(database: Path) -> dict:
    with contextlib.closing(sqlite3.connect(database)) as db:
        names = [r[0] for r in db.execute(
            "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'entry_fts%' "
            "AND name NOT LIKE 'sqlite_%'")]
        return {n: sorted(map(repr, db.execute(f"SELECT * FROM {n}"))) for n in names}


def files_under(root: Path) -> dict:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for sub in ("attachments", "runs") if (root / sub).exists()
            for p in sorted((root / sub).rglob("*")) if p.is_file() and "tmp" not in p.parts}


@pytest.fixture
def archive(app, tmp_path):
    fill(app)
    data_dir = Path(app.config["DATA_DIR"])
    path, manifest = backups.create(data_dir / "commonplace.db", data_dir, tmp_path / "out")
    return path, manifest


def test_an_archive_holds_everything_and_restores_identical(app, archive, tmp_path):
    path, manifest = archive
    data_dir = Path(app.config["DATA_DIR"])
    assert manifest.counts["entry"] >= 3 and manifest.counts["revision"] >= 4
    assert manifest.counts["run"] == 1 and manifest.counts["run_artifact"] == 1
    assert manifest.schema_revision and len(manifest.files) == 4  # db, png, log, artifact
    assert backups.verify(path).files == manifest.files
    restored = tmp_path / "fresh"
    got, aside = backups.restore(path, restored)
    assert aside is None and got.counts == manifest.counts
    assert table_rows(restored / "commonplace.db") == table_rows(data_dir / "commonplace.db")
    assert files_under(restored) == files_under(data_dir)


def test_a_non_empty_data_dir_is_refused_then_moved_aside_never_deleted(archive, tmp_path):
    path, _ = archive
    target = tmp_path / "busy"
    target.mkdir()
    (target / "precious.txt").write_text("mine")
    with pytest.raises(backups.BackupError, match="not empty"):
        backups.restore(path, target)
    assert (target / "precious.txt").read_text() == "mine"
    _, aside = backups.restore(path, target, force=True)
    assert (aside / "precious.txt").read_text() == "mine" and (target / "commonplace.db").exists()


def rewrite(path: Path, out: Path, change) -> Path:
    """A copy of the archive with one member's bytes changed by `change`."""
    with tarfile.open(path, "r:gz") as src, tarfile.open(out, "w:gz") as dst:
        for member in src.getmembers():
            data = src.extractfile(member).read()
            data = change(member.name, data)
            member.size = len(data)
            dst.addfile(member, io.BytesIO(data))
    return out


@pytest.mark.parametrize("damage", ["truncated", "flipped byte", "not gzip", "member changed",
                                    "member missing"])
def test_a_damaged_archive_is_refused_and_nothing_changes(archive, tmp_path, damage):
    path, _ = archive
    bad = tmp_path / "bad.tar.gz"
    raw = path.read_bytes()
    if damage == "truncated":
        bad.write_bytes(raw[: len(raw) // 2])
    elif damage == "flipped byte":
        bad.write_bytes(raw[:200] + bytes([raw[200] ^ 0xFF]) + raw[201:])
    elif damage == "not gzip":
        bad.write_bytes(b"hello" * 100)
    elif damage == "member changed":
        rewrite(path, bad, lambda n, d: d + b"x" if n.endswith("log.txt") else d)
    else:
        with tarfile.open(path, "r:gz") as src, tarfile.open(bad, "w:gz") as dst:
            for member in src.getmembers():
                if not member.name.startswith("attachments/"):
                    dst.addfile(member, src.extractfile(member))
    target = tmp_path / "target"
    with pytest.raises(backups.BackupError):
        backups.verify(bad)
    with pytest.raises(backups.BackupError):
        backups.restore(bad, target)
    assert not target.exists() and [p.name for p in tmp_path.iterdir()
                                    if p.name.startswith(".target")] == []


def test_an_archive_of_the_previous_schema_restores_and_migrates(tmp_path, make_app):
    old = tmp_path / "old"
    old.mkdir()
    url = f"sqlite:///{old}/commonplace.db"
    database = dbmod.Database(url)
    cfg = upgrades.alembic_config(url)
    with database.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0002")  # an older schema: an upgrade is pending
    path, manifest = backups.create(old / "commonplace.db", old, tmp_path / "out")
    assert manifest.schema_revision == "0002"
    restored = tmp_path / "restored"
    backups.restore(path, restored)
    app = make_app(DATA_DIR=restored, DATABASE_URL=f"sqlite:///{restored}/commonplace.db")
    assert upgrades.pending_migrations(app.extensions["db"]) == []


def test_the_newest_backup_and_its_age(tmp_path, archive):
    path, _ = archive
    assert backups.last_backup(tmp_path / "none")["warning"].startswith("no backup yet")
    fresh = backups.last_backup(path.parent)
    assert fresh["age_hours"] < 1 and "warning" not in fresh
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=3)
    assert "3 days old" in backups.last_backup(path.parent, now=later)["warning"]
    assert gzip.open(path).read(1)  # a real gzip stream


def test_the_notebooks_files_are_its_owners_alone(make_app, data_dir):
    """Outside systemd too: a data folder left 0755 is made 0700, and the database, its
    token hashes and a backup archive are written 0600."""
    data_dir.chmod(0o755)
    app = make_app()
    assert stat.S_IMODE(data_dir.stat().st_mode) == 0o700
    add_token(app.extensions["db"], "cli", "owner")
    database = data_dir / "commonplace.db"
    assert stat.S_IMODE(database.stat().st_mode) == 0o600
    path, _ = backups.create(database, data_dir, data_dir / "backups")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
