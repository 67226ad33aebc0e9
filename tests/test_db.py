"""The database file: migrations back up an existing database before they change it, and
SQLite runs in WAL mode with foreign keys and a busy timeout."""

import sqlite3

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
