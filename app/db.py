"""Database engine, sessions, migrations and backups.

SQLite is the default and shapes the choices here: WAL so readers never wait for the
writer, a busy timeout so concurrent writers queue instead of failing, and write
transactions that take the write lock up front (BEGIN IMMEDIATE) so a read-then-write never
fails half way with "database is locked". And a small page cache per connection: the
operating system keeps the file's pages for every connection and process, so SQLite's own
cache only saves a copy, and each of a web worker's connections (one per thread at once)
kept its own, mostly the same pages (docs/PERFORMANCE.md, *Connections*). For the same
reason a process keeps a few idle connections in all, for its sessions and its readers
alike (IdlePool).
"""

from __future__ import annotations

import contextlib
import json
import re
import sqlite3
from collections import deque, namedtuple
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import sqlalchemy as sa
from sqlalchemy.dialects import sqlite
from sqlalchemy.orm import Session
from sqlalchemy.pool import ConnectionPoolEntry, NullPool

if TYPE_CHECKING:
    from flask import Flask

MIGRATIONS_DIR = Path(__file__).resolve().parent.parent / "migrations"
WRITE_METHODS = {"POST", "PUT", "PATCH", "DELETE"}
# KiB of pages each SQLite connection keeps (SQLite's default is 2,000 KiB): half the default
# left the web workers smaller at the same CPU per request; a quarter saved a little more
# memory but slowed every entry page (docs/PERFORMANCE.md, *Connections*).
CACHE_KIB = 1024
# Idle connections a process keeps, its sessions' and its readers' together: SQLAlchemy's
# pool_size default. Each holds up to CACHE_KIB of pages and its statements; a reader's own
# five beside the pool's five made a worker bigger, and two in all slowed the entry page
# under many clients (more threads at once than idle connections): docs/PERFORMANCE.md.
CONNECTIONS_KEPT = 5
# How long a statement waits for another writer's lock before "database is locked"
# (the DB_BUSY_TIMEOUT_S setting; tests of a held lock shorten it).
BUSY_TIMEOUT_S = 10.0


class IdlePool(NullPool):
    """SQLAlchemy's pool for a SQLite file: up to CONNECTIONS_KEPT idle connections, the
    one given back last taken first (its page cache is warm), the rest closed when given
    back. As many may be open at once as a process has threads. get_reader takes its
    connections from here too, straight from the idle ones (take) and back (the
    connection's own checkin, to the pool it came from), without the pool's checkout:
    that (a proxy, its events, a reset on return) showed in the entry page's profile
    (docs/PERFORMANCE.md, *Profiles*). A pop and an append are atomic under the GIL.
    After engine.dispose() (which replaces the pool) a connection from before is closed
    when it is given back, never kept."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.idle: deque[ConnectionPoolEntry] = deque()
        self.disposed = False

    def status(self) -> str:
        return f"IdlePool: {len(self.idle)} idle"

    def _do_get(self) -> ConnectionPoolEntry:
        try:
            return self.idle.pop()
        except IndexError:
            return self._create_connection()  # opened, and set up by the connect event

    def _do_return_conn(self, record: ConnectionPoolEntry) -> None:
        if self.disposed or len(self.idle) >= CONNECTIONS_KEPT or record.dbapi_connection is None:
            record.close()
        else:
            self.idle.append(record)

    def dispose(self) -> None:
        self.disposed = True
        self.shed()

    def shed(self) -> None:
        """Close the idle connections (a worker at rest: app/web/resting.py)."""
        while True:
            try:
                record = self.idle.pop()
            except IndexError:  # (a request may have taken the last one meanwhile)
                return
            record.close()

    def take(self) -> ConnectionPoolEntry:
        """A connection for get_reader, not checked out (the pool does not count it)."""
        record = self._do_get()
        record.get_connection()  # (re)connects one that was invalidated
        return record


def create_engine(url: str, busy_timeout_s: float = BUSY_TIMEOUT_S) -> sa.Engine:
    if not url.startswith("sqlite"):
        return sa.create_engine(url, pool_pre_ping=True)
    path = sa.make_url(url).database
    in_file = bool(path) and path != ":memory:"
    if in_file:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    # (a database in memory is one per connection: SQLAlchemy's own pool keeps it)
    engine = sa.create_engine(url, connect_args={"check_same_thread": False},
                              **({"poolclass": IdlePool} if in_file else {}))

    @sa.event.listens_for(engine, "connect")
    def _configure(dbapi_conn, _record):
        dbapi_conn.isolation_level = None  # we emit BEGIN ourselves (SQLAlchemy's recipe)
        cur = dbapi_conn.cursor()
        # busy_timeout first: switching to WAL can itself meet a busy database.
        cur.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
        cur.execute("PRAGMA journal_mode = WAL")
        cur.execute("PRAGMA synchronous = NORMAL")
        cur.execute("PRAGMA foreign_keys = ON")
        cur.execute(f"PRAGMA cache_size = -{CACHE_KIB}")
        cur.close()

    @sa.event.listens_for(engine, "begin")
    def _begin(conn):
        immediate = conn.get_execution_options().get("sqlite_immediate")
        # Straight to sqlite3, as the connect hook does: every request begins one, and
        # through exec_driver_sql it was a Core execution of its own (a session that
        # opens, reads one row and closes: 354 Python calls before, 312 now).
        conn.connection.dbapi_connection.execute("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine


# What a statement raises when SQLite's lock stays taken: through SQLAlchemy, or straight
# from sqlite3 where a transaction begins (the begin hook below).
OPERATIONAL = (sa.exc.OperationalError, sqlite3.OperationalError)


def locked(exc: Exception) -> bool:
    """SQLite's "database is locked": another writer held the lock past the busy timeout."""
    return "database is locked" in str(getattr(exc, "orig", exc))


class Database:
    """The engine plus the two ways to open a session: for reading and for writing."""

    def __init__(self, url: str, notes_dir: Path | None = None,
                 busy_timeout_s: float = BUSY_TIMEOUT_S):
        self.url = url
        self.notes_dir = notes_dir
        self.engine = create_engine(url, busy_timeout_s)
        self._write_engine = self.engine.execution_options(sqlite_immediate=True)
        # A SQLite file, that is; another database (or one in memory, a database per
        # connection) reads in sessions.
        self.has_readers = self.sqlite_path is not None

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

    def shed(self) -> None:
        """Close the engine's idle connections, their page caches with them."""
        if isinstance(self.engine.pool, IdlePool):
            self.engine.pool.shed()

    def take_reader(self) -> ConnectionPoolEntry:
        """An idle connection of the engine's (SQLite), in a read transaction of its own."""
        reader = self.engine.pool.take()
        reader.dbapi_connection.execute("BEGIN")
        return reader

    def give_back_reader(self, reader: ConnectionPoolEntry) -> None:
        """End the reader's transaction and give it back to its pool (IdlePool)."""
        try:
            reader.dbapi_connection.rollback()
        except sqlite3.Error:
            reader.invalidate()  # closed; the pool does not keep it
            raise
        finally:
            reader.checkin(_fairy_was_created=False)


def from_config(config: dict) -> Database:
    return Database(config["DATABASE_URL"], Path(config["DATA_DIR"]) / "notes",
                    config.get("DB_BUSY_TIMEOUT_S", BUSY_TIMEOUT_S))


def init_app(app: Flask) -> None:
    # Flask is imported here and below where it is used: a process that serves no page
    # (the scheduler) never loads it.
    from flask import g
    app.extensions["db"] = from_config(app.config)

    @app.teardown_appcontext
    def _close(_exc):
        _end_reader()
        session = g.pop("db_session", None)
        if session is not None:
            session.close()


def get_db() -> Database:
    from flask import current_app
    return current_app.extensions["db"]


def get_session() -> Session:
    """The request's session. A request that may write takes the write lock at its first
    statement, so its read-modify-write cannot be interleaved with another writer."""
    from flask import g, request
    if "db_session" not in g:
        _end_reader()
        g.db_session = get_db().session(write=request.method in WRITE_METHODS)
    return g.db_session


def get_reader() -> Session | ConnectionPoolEntry:
    """Where a request that only reads runs the statements its page runs on every view
    (Prepared): a sqlite3 connection in a read transaction of its own, with no ORM
    session. Building and closing a session was a large share of a worker's time on the
    entry page under load (docs/PERFORMANCE.md, *Profiles*), and the page reads nothing
    through the ORM. A request that
    has a session, or may write, reads in its session (as on another database).

    One snapshot holds until the request asks for a session: the reader's transaction
    ends there, and the session begins its own. So a view reads through one or the
    other; kept.py, which reads the version before a view that may ask for a session,
    reads it again after, through the session, and keeps the page only if both agree."""
    from flask import g, request
    ctx = g._get_current_object()  # once: each look through the proxy costs three calls
    reader = ctx.get("db_reader")
    if reader is not None:  # (a request that asks for a session gives its reader back)
        return reader
    if "db_session" in ctx or request.method in WRITE_METHODS:
        return get_session()
    db = get_db()
    if not db.has_readers:
        return get_session()
    ctx.db_reader = reader = db.take_reader()
    return reader


def _end_reader() -> None:
    from flask import g
    reader = g.pop("db_reader", None)
    if reader is not None:
        get_db().give_back_reader(reader)


# -- statements the reading pages run on every view ------------------------------------------

NAMED = sqlite.dialect(paramstyle="named")  # SQLite's SQL with :name binds
EXPANDING = re.compile(r"\(__\[POSTCOMPILE_(\w+)\]\)")  # `IN :list`, filled at execution


def _literal(value: str | int) -> str:
    return str(value) if isinstance(value, int) else "'" + value.replace("'", "''") + "'"


class Prepared:
    """A select built once, compiled once to SQLite's SQL, and run straight on the
    session's sqlite3 connection: the same transaction, so one page still reads one
    snapshot, but none of SQLAlchemy's per-execution work (the statement's cache key, an
    execution context, the result's metadata), which on the entry page cost more than
    SQLite's answers (the neighbours' UNION ALL mostly its cache key; docs/PERFORMANCE.md,
    *Reading an entry*). Values still go through the column types'
    own bind and result processors, so a row reads exactly as through Core. A list bound
    with `expanding=True` travels as JSON through json_each. On another database the
    statement runs through SQLAlchemy as usual."""

    def __init__(self, query: sa.Select | sa.CompoundSelect):
        self.query = query
        compiled = query.compile(dialect=NAMED)
        self.sql = EXPANDING.sub(r"(SELECT value FROM json_each(:\1))", compiled.string)
        self.lists = {name for bind, name in compiled.bind_names.items() if bind.expanding}
        self.binders = {name: processor for bind, name in compiled.bind_names.items()
                        if (processor := bind.type.dialect_impl(NAMED).bind_processor(NAMED))}
        self.defaults = {name: self._bound(name, bind.value)
                         for bind, name in compiled.bind_names.items() if not bind.required}
        # The query's own constants (kind = 'week', status = 'published', LIMIT 1) go in
        # as SQL literals. Bound, a value compared with a column that a partial index is
        # conditioned on (ix_entry_one_letter_per_week, ix_entry_draft_week) marks the
        # statement to be compiled again whenever it is bound, so on every execution
        # (docs/PERFORMANCE.md, *Reading an entry*).
        constants = {name: _literal(value) for name, value in self.defaults.items()
                     if type(value) in (str, int)}
        self.sql = re.sub(r":(\w+)", lambda m: constants.get(m[1], m[0]), self.sql)
        self.defaults = {k: v for k, v in self.defaults.items() if k not in constants}
        columns = list(query.selected_columns)
        self.row = namedtuple("Row", [c.key for c in columns])
        self.results = [(i, processor) for i, c in enumerate(columns)
                        if (processor := c.type.dialect_impl(NAMED).result_processor(NAMED, None))]

    def _bound(self, name: str, value):
        processor = self.binders.get(name)
        if name in self.lists:
            return json.dumps([processor(v) if processor else v for v in value])
        return processor(value) if processor and value is not None else value

    def run(self, session: Session | sa.Connection | ConnectionPoolEntry,
            params: dict | None = None) -> list:
        """The rows, as named tuples, read in the session's (or connection's) transaction;
        a pooled sqlite3 connection (get_reader) is read as it stands."""
        dbapi = sqlite_connection(session)
        if dbapi is None:
            conn = session.connection() if isinstance(session, Session) else session
            return [self.row._make(r) for r in conn.execute(self.query, params)]
        values = dict(self.defaults)
        for name, value in (params or {}).items():
            values[name] = self._bound(name, value)
        found = dbapi.execute(self.sql, values).fetchall()
        if self.results:
            for n, row in enumerate(found):
                row = list(row)
                for i, processor in self.results:
                    row[i] = processor(row[i])
                found[n] = row
        return [self.row._make(r) for r in found]


def sqlite_connection(session: Session | sa.Connection | ConnectionPoolEntry
                      ) -> sqlite3.Connection | None:
    """The sqlite3 connection under a session (in its transaction, begun if need be), a
    Core connection or a pooled one (get_reader); None on another database."""
    if isinstance(session, ConnectionPoolEntry):
        dbapi = session.dbapi_connection
    else:
        conn = session.connection() if isinstance(session, Session) else session
        dbapi = conn.connection.dbapi_connection
    return dbapi if isinstance(dbapi, sqlite3.Connection) else None


def insert_many(session: Session, table: sa.Table, rows: list[dict]) -> None:
    """INSERT rows (dicts with the same keys) in one executemany. On SQLite straight on
    the session's sqlite3 connection, each value through its column type's own bind
    processor, as SQLAlchemy would store it: a bulk import's entries carry several rows
    each (entries, revisions, links, tags), and SQLAlchemy's per-row parameter work was a
    large share of an import's CPU (docs/PERFORMANCE.md, *Profiles*). Python-side column defaults
    are not applied here, so a column that has one must be in the rows."""
    if not rows:
        return
    missing = [c.key for c in table.c if c.default is not None and c.key not in rows[0]]
    if missing:
        raise ValueError(f"insert_many into {table.name} needs {', '.join(missing)}")
    conn = session.connection()
    dbapi = conn.connection.dbapi_connection
    if not isinstance(dbapi, sqlite3.Connection):
        conn.execute(table.insert(), rows)
        return
    names = list(rows[0])
    processors = [(i, processor) for i, name in enumerate(names)
                  if (processor := table.c[name].type.dialect_impl(NAMED)
                      .bind_processor(NAMED))]
    values = [[row[name] for name in names] for row in rows]
    for value in values:
        for i, processor in processors:
            if value[i] is not None:
                value[i] = processor(value[i])
    columns = ", ".join(f'"{table.c[name].name}"' for name in names)
    dbapi.executemany(f'INSERT INTO "{table.name}" ({columns}) '
                      f'VALUES ({", ".join("?" * len(names))})', values)
