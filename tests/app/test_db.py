"""The database file: migrations back up an existing database before they change it, and
SQLite runs in WAL mode with foreign keys and a busy timeout."""

import sqlite3
import subprocess
import sys
from pathlib import Path

from app import db as dbmod
from app import upgrades


def test_upgrade_backs_up_an_existing_database_first(tmp_path):
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as conn:  # a file with data that predates the migrations
        conn.execute("CREATE TABLE precious (v TEXT)")
        conn.execute("INSERT INTO precious VALUES ('keep me')")
    database = dbmod.Database(f"sqlite:///{path}")
    assert upgrades.pending_migrations(database)[-1] == "0001"  # all of them, oldest last
    backup = upgrades.upgrade(database, tmp_path / "backups")
    assert backup is not None and backup.parent == tmp_path / "backups"
    with sqlite3.connect(backup) as conn:
        assert conn.execute("SELECT v FROM precious").fetchall() == [("keep me",)]
        assert "entry" not in {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    assert upgrades.pending_migrations(database) == []
    assert upgrades.upgrade(database, tmp_path / "backups") is None  # nothing pending, no backup
    # a brand-new database has nothing to save
    fresh = dbmod.Database(f"sqlite:///{tmp_path / 'new.db'}")
    assert upgrades.upgrade(fresh, tmp_path / "backups2") is None
    assert not (tmp_path / "backups2").exists()


def test_sqlite_runs_in_wal_with_foreign_keys(db):
    with db.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() >= 5000
        # each connection's own page cache is small: a worker holds one per busy thread
        assert conn.exec_driver_sql("PRAGMA cache_size").scalar() == -dbmod.CACHE_KIB


def test_the_models_do_not_load_the_postgresql_dialect():
    # a postgresql_* option on a table loads SQLAlchemy's whole PostgreSQL dialect (~2 MB of
    # every process, web workers included); the migrations carry Postgres's own options
    code = ("import sys, app.models; "
            "sys.exit(any(m.startswith('sqlalchemy.dialects.postgresql') for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[2],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
