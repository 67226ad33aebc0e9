"""Database engine, sessions, migrations and backups.

SQLite is the default and shapes the choices here: WAL so readers never wait for the
writer, a busy timeout so concurrent writers queue instead of failing, and write
transactions that take the write lock up front (BEGIN IMMEDIATE) so a read-then-write never
fails half way with "database is locked".
"""

from __future__ import annotations

import contextlib
import datetime as dt
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import sqlalchemy as sa
from flask import Flask, current_app, g, request
from sqlalchemy.orm import Session

MIGRATIONS_DIR = Path(__file__).resolve().parent.parent / "migrations"
WRITE_METHODS = {"POST", "PUT", "PATCH", "DELETE"}


def create_engine(url: str) -> sa.Engine:
    if not url.startswith("sqlite"):
        return sa.create_engine(url, pool_pre_ping=True)
    path = sa.make_url(url).database
    if path and path != ":memory:":
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    # LIFO: a request takes the connection used last, whose page cache (and the counts
    # app/notebook/browse.py keeps per connection) are warm; the others stay idle.
    engine = sa.create_engine(url, connect_args={"check_same_thread": False},
                              pool_use_lifo=True)

    @sa.event.listens_for(engine, "connect")
    def _configure(dbapi_conn, _record):
        dbapi_conn.isolation_level = None  # we emit BEGIN ourselves (SQLAlchemy's recipe)
        cur = dbapi_conn.cursor()
        # busy_timeout first: switching to WAL can itself meet a busy database.
        cur.execute("PRAGMA busy_timeout = 10000")
        cur.execute("PRAGMA journal_mode = WAL")
        cur.execute("PRAGMA synchronous = NORMAL")
        cur.execute("PRAGMA foreign_keys = ON")
        cur.close()

    @sa.event.listens_for(engine, "begin")
    def _begin(conn):
        immediate = conn.get_execution_options().get("sqlite_immediate")
        # Straight to sqlite3, as the connect hook does: every request begins one, and
        # through exec_driver_sql it was a Core execution of its own (a session that
        # opens, reads one row and closes: 354 Python calls before, 312 now).
        conn.connection.dbapi_connection.execute("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine


class Database:
    """The engine plus the two ways to open a session: for reading and for writing."""

    def __init__(self, url: str, notes_dir: Path | None = None):
        self.url = url
        self.notes_dir = notes_dir
        self.engine = create_engine(url)
        self._write_engine = self.engine.execution_options(sqlite_immediate=True)

    @property
    def sqlite_path(self) -> Path | None:
        """The database file, when the database is a SQLite file."""
        if not self.url.startswith("sqlite"):
            return None
        path = sa.make_url(self.url).database
        return Path(path) if path and path != ":memory:" else None

    def session(self, write: bool = False) -> Session:
        session = Session(self._write_engine if write else self.engine, expire_on_commit=False)
        # where app/notebook/mirror.py writes its files after commit
        session.info["notes_dir"] = self.notes_dir
        return session

    @contextlib.contextmanager
    def write(self) -> Iterator[Session]:
        """A write transaction: commit on success, roll back on any error."""
        with self.session(write=True) as session, session.begin():
            yield session

    @contextlib.contextmanager
    def read(self) -> Iterator[Session]:
        with self.session() as session:
            yield session


def init_app(app: Flask) -> None:
    app.extensions["db"] = Database(
        app.config["DATABASE_URL"], Path(app.config["DATA_DIR"]) / "notes"
    )

    @app.teardown_appcontext
    def _close(_exc):
        session = g.pop("db_session", None)
        if session is not None:
            session.close()


def get_db() -> Database:
    return current_app.extensions["db"]


def get_session() -> Session:
    """The request's session. A request that may write takes the write lock at its first
    statement, so its read-modify-write cannot be interleaved with another writer."""
    if "db_session" not in g:
        g.db_session = get_db().session(write=request.method in WRITE_METHODS)
    return g.db_session


# -- migrations: app/upgrades.py -----------------------------------------------------------
# Alembic (with Mako and much of SQLAlchemy's DDL) is ~11 MB of a web worker that never
# migrates, so the migrations live in app/upgrades.py, which only the processes that
# migrate import (the CLI's `up` and `db upgrade`, tests, benches).


def backup(db: Database, backup_dir: Path, reason: str = "backup") -> Path:
    """Copy the SQLite database with the online backup API (consistent even while in use)."""
    source = sa.make_url(db.url).database
    backup_dir.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S%fZ")
    dest = backup_dir / f"commonplace-{stamp}-{reason}.db"
    with contextlib.closing(sqlite3.connect(source)) as src, contextlib.closing(
        sqlite3.connect(dest)
    ) as dst:
        src.backup(dst)
    return dest
