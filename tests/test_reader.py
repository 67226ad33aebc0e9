"""A request that only reads runs its page's statements on get_reader's connection (app/db.py):
a sqlite3 connection of the database's own (detached from the pool), in a read transaction
of its own, no ORM session. What it must keep: one snapshot for as long as it reads, the
session's snapshot once a session is asked for, the session itself for a request that may
write, and after every request, a refused one included, every connection idle and out of
its transaction: the pool's back in the pool, the reader back among the idle readers."""

from __future__ import annotations

import datetime as dt
import sqlite3

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from app.db import get_reader, get_session
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


def _idle_readers(db) -> list:
    """The database's idle read connections (app/db.py: Database.give_back_reader)."""
    return list(db._idle_readers)


def test_a_session_asked_for_after_the_reader_ends_it_and_reads_on(app, db):
    pool = db.engine.pool
    before = _version(db)
    with app.test_request_context("/", method="GET"):
        reader = get_reader()
        assert browse.version(reader) == before
        assert reader not in _idle_readers(db) and pool.checkedout() == 0  # not the pool's
        _bump_version(db)
        session = get_session()
        assert reader in _idle_readers(db)  # the reader was given back
        assert not reader.dbapi_connection.in_transaction
        assert get_reader() is session  # from now on the request reads in its session
        assert browse.version(session) > before
        app.do_teardown_appcontext()
    assert pool.checkedout() == 0


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
    url = path.format(id=draft.id, slug=draft.slug)
    for headers, ok in ((AS_OWNER, True), (AS_VIEWER, False)):
        status = served.client.get(url, headers=headers, follow_redirects=True).status_code
        if "999999" in url:
            assert status == 404
        elif url.startswith(("/entries/", "/api/")):
            assert status == (200 if ok else 404)
        else:
            assert status == 200
        assert served.db.engine.pool.checkedout() == 0
        with served.db.engine.connect() as conn:  # the one a request takes next (LIFO)
            assert not conn.connection.dbapi_connection.in_transaction
        readers = _idle_readers(served.db)
        assert readers and not any(r.dbapi_connection.in_transaction for r in readers)


def test_the_reader_holds_a_read_transaction_until_the_request_ends(app, db):
    with app.test_request_context("/", method="GET"):
        reader = get_reader()
        assert isinstance(reader.dbapi_connection, sqlite3.Connection)
        assert reader.dbapi_connection.in_transaction
        app.do_teardown_appcontext()
    assert db.engine.pool.checkedout() == 0
    assert _idle_readers(db) == [reader] and not reader.dbapi_connection.in_transaction


def test_idle_readers_are_kept_up_to_a_limit_and_reused(app, db):
    """The connection given back last is taken first (its page cache is warm); beyond
    READERS_KEPT idle ones, a reader given back is closed, as the pool closes overflow."""
    from app.db import READERS_KEPT

    taken = [db.take_reader() for _ in range(READERS_KEPT + 2)]
    last = taken[-1].dbapi_connection
    for reader in taken:
        db.give_back_reader(reader)
    idle = _idle_readers(db)
    assert idle == taken[:READERS_KEPT]
    with pytest.raises(sqlite3.ProgrammingError):  # closed
        last.execute("SELECT 1")
    assert db.take_reader() is taken[READERS_KEPT - 1]  # last in, first out


def test_disposing_the_engine_closes_the_idle_readers_too(app, db):
    """engine.dispose() replaces the pool and closes its connections; a reader opened
    before is closed the next time one is asked for (or given back), never reused."""
    old = db.take_reader()
    db.give_back_reader(old)
    held = db.take_reader()  # the same one, held across the dispose
    assert held is old
    db.engine.dispose()
    db.give_back_reader(held)
    assert held not in _idle_readers(db) and held.dbapi_connection is None  # closed
    fresh = db.take_reader()
    assert fresh is not old and fresh.info["pool"] is db.engine.pool
    db.give_back_reader(fresh)
