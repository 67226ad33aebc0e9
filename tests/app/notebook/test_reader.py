"""A request that only reads runs its page's statements on get_reader's connection (app/db.py):
an idle sqlite3 connection taken straight from the pool (IdlePool, not checked out), in a
read transaction of its own, no ORM session. What it must keep: one snapshot for as long as
it reads, the session's snapshot once a session is asked for, the session itself for a
request that may write, and after every request, a refused one included, every open
connection idle in the pool and out of its transaction. Sessions and readers keep one set
of idle connections between them, at most CONNECTIONS_KEPT."""

from __future__ import annotations

import datetime as dt
import sqlite3

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from app.db import CONNECTIONS_KEPT, get_reader, get_session
from app.models import Entry
from app.notebook import addresses, browse, entries
from tests.helpers import AS_OWNER, AS_VIEWER


def _entry(db, title="Pipelines", body="a body", status="published") -> Entry:
    with db.write() as session:
        return entries.create(session, title=title, body=body, author="t", status=status,
                              date=dt.date(2024, 3, 5))


def _version(db) -> int:
    with db.read() as session:
        return browse.version(session)


def _bump_version(db) -> None:
    """A change committed by another connection, as another request or process makes."""
    _entry(db, title="Elsewhere")


@pytest.fixture
def sessions_begun():
    """Every ORM transaction begun while the test runs (SQLAlchemy's own event)."""
    begun: list[Session] = []

    def record(session, transaction):
        if transaction.parent is None:
            begun.append(session)

    sa.event.listen(Session, "after_transaction_create", record)
    yield begun
    sa.event.remove(Session, "after_transaction_create", record)


def test_an_entry_page_and_its_api_read_without_an_orm_session(client, db, sessions_begun):
    entry = _entry(db)
    linker = _entry(db, title="Linker", body="see [[Pipelines]]")
    sessions_begun.clear()
    page = client.get(addresses.entry_url(entry))
    assert page.status_code == 200 and b"Pipelines" in page.data
    assert addresses.entry_url(linker).encode() in page.data  # the backlink was read
    assert client.get(f"/api/v1/entries/{entry.id}").json["title"] == "Pipelines"
    assert client.get(f"/api/v1/entries/{entry.id}/backlinks").json["total"] == 1
    assert sessions_begun == []


def test_the_reader_reads_one_snapshot_until_the_request_ends(app, db):
    before = _version(db)
    with app.test_request_context("/", method="GET"):
        reader = get_reader()
        assert browse.version(reader) == before
        _bump_version(db)  # committed meanwhile, by another connection
        assert browse.version(get_reader()) == before  # the same transaction, the same answer
        assert get_reader() is reader
    with app.test_request_context("/", method="GET"):
        assert browse.version(get_reader()) > before


def _idle(db) -> list:
    """The pool's idle connections, the one given back last at the end."""
    return list(db.engine.pool.idle)


@pytest.fixture
def open_connections(db):
    """The database's open sqlite3 connections, followed through SQLAlchemy's own pool
    events from the idle ones the test starts with."""
    opened = {record.dbapi_connection for record in db.engine.pool.idle}

    def connect(dbapi, _record):
        opened.add(dbapi)

    def close(dbapi, _record):
        opened.discard(dbapi)

    sa.event.listen(db.engine, "connect", connect)
    sa.event.listen(db.engine, "close", close)
    yield opened
    sa.event.remove(db.engine, "connect", connect)
    sa.event.remove(db.engine, "close", close)


def _all_idle(db, opened: set) -> bool:
    return opened == {record.dbapi_connection for record in db.engine.pool.idle}

def test_a_session_asked_for_after_the_reader_ends_it_and_reads_on(app, db,
                                                                     open_connections):
    before = _version(db)
    with app.test_request_context("/", method="GET"):
        reader = get_reader()
        assert browse.version(reader) == before
        assert reader not in _idle(db)
        _bump_version(db)
        session = get_session()
        assert _idle(db)[-1] is reader  # the reader was given back
        assert not reader.dbapi_connection.in_transaction
        assert get_reader() is session  # from now on the request reads in its session
        assert browse.version(session) > before
        assert reader not in _idle(db)  # the session took it: the idle one used last
        app.do_teardown_appcontext()
    assert _all_idle(db, open_connections)


def test_a_request_that_may_write_reads_in_its_session(app, db):
    with app.test_request_context("/entries", method="POST"):
        reader = get_reader()
        assert isinstance(reader, Session) and reader is get_session()
        app.do_teardown_appcontext()


@pytest.mark.parametrize("path", ["/entries/{id}/{slug}", "/api/v1/entries/{id}",
                                  "/api/v1/entries/{id}/backlinks", "/entries/999999/x",
                                  "/api/v1/entries/999999", "/", "/sitemap"])
def test_every_connection_goes_back_to_the_pool_out_of_its_transaction(served, path):
    draft = _entry(served.db, status="draft")  # a viewer is refused it: 404, mid-read
    opened = {record.dbapi_connection for record in served.db.engine.pool.idle}
    sa.event.listen(served.db.engine, "connect", lambda dbapi, _record: opened.add(dbapi))
    url = path.format(id=draft.id, slug=draft.slug)
    for headers, ok in ((AS_OWNER, True), (AS_VIEWER, False)):
        status = served.client.get(url, headers=headers, follow_redirects=True).status_code
        if "999999" in url:
            assert status == 404
        elif url.startswith(("/entries/", "/api/")):
            assert status == (200 if ok else 404)
        else:
            assert status == 200
        idle = _idle(served.db)
        assert {record.dbapi_connection for record in idle} == opened  # none held
        assert not any(record.dbapi_connection.in_transaction for record in idle)


def test_the_reader_holds_a_read_transaction_until_the_request_ends(app, db,
                                                                     open_connections):
    with app.test_request_context("/", method="GET"):
        reader = get_reader()
        assert isinstance(reader.dbapi_connection, sqlite3.Connection)
        assert reader.dbapi_connection.in_transaction
        app.do_teardown_appcontext()
    assert _all_idle(db, open_connections)
    assert _idle(db)[-1] is reader and not reader.dbapi_connection.in_transaction


def test_idle_readers_are_kept_up_to_a_limit_and_reused(app, db):
    """The connection given back last is taken first (its page cache is warm); beyond
    CONNECTIONS_KEPT idle ones, one given back is closed."""
    taken = [db.take_reader() for _ in range(CONNECTIONS_KEPT + 2)]
    last = taken[-1].dbapi_connection
    for reader in taken:
        db.give_back_reader(reader)
    assert _idle(db) == taken[:CONNECTIONS_KEPT]
    with pytest.raises(sqlite3.ProgrammingError):  # closed
        last.execute("SELECT 1")
    assert db.take_reader() is taken[CONNECTIONS_KEPT - 1]  # last in, first out


def test_sessions_and_readers_keep_one_set_of_idle_connections(app, db, open_connections):
    """A worker's threads may hold a session's connection and a reader each at once; what
    stays open after is CONNECTIONS_KEPT in all, and either kind takes the other's."""
    readers = [db.take_reader() for _ in range(CONNECTIONS_KEPT)]
    sessions = [db.session() for _ in range(CONNECTIONS_KEPT)]
    for session in sessions:
        assert browse.version(session) is not None  # its connection checked out
    assert len(open_connections) == 2 * CONNECTIONS_KEPT and not _idle(db)
    for reader in readers:
        db.give_back_reader(reader)
    for session in sessions:
        session.close()
    assert _all_idle(db, open_connections) and len(open_connections) == CONNECTIONS_KEPT
    assert {r.dbapi_connection for r in _idle(db)} == {r.dbapi_connection for r in readers}
    with db.read() as session:  # a session takes the reader given back last
        assert session.connection().connection.dbapi_connection is readers[-1].dbapi_connection


def test_disposing_the_engine_closes_the_idle_readers_too(app, db):
    """engine.dispose() replaces the pool and closes its connections; a reader opened
    before is closed the next time one is asked for (or given back), never reused."""
    old = db.take_reader()
    db.give_back_reader(old)
    held = db.take_reader()  # the same one, held across the dispose
    assert held is old
    db.engine.dispose()
    db.give_back_reader(held)
    assert held.dbapi_connection is None  # closed, not kept by the old pool or the new
    fresh = db.take_reader()
    assert fresh is not old
    db.give_back_reader(fresh)
    assert _idle(db) == [fresh]
