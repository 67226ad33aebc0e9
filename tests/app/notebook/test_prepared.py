"""app/db.py's Prepared: the reading pages' statements compiled once and run straight on
sqlite3 must answer exactly what SQLAlchemy answers for the same statement - the same
rows, in the same order, with the same Python types (dates, datetimes) - whatever the
parameters: lists (json_each), dates, limits, drafts in or out."""

from __future__ import annotations

import datetime as dt
import re

import pytest
import sqlalchemy as sa

from app.db import Prepared
from app.models import Entry
from app.notebook import browse, entries, entry_rows, letters


@pytest.fixture
def notebook(db):
    """Entries over two years: letters, drafts, tags, links between them, two entries on
    one day (the neighbours' tie on id)."""
    with db.write() as session:
        day = dt.date(2024, 12, 20)
        for n in range(40):
            date = day + dt.timedelta(days=n // 2)
            links = f" See [[Entry {n - 1}]] and [[{date.isoformat()}]]." if n else ""
            entries.create(session, author="t", date=date, title=f"Entry {n}",
                           body=f"Body {n}.{links}", tags=["gpu"] if n % 3 else ["gpu", "notes"],
                           status="draft" if n % 7 == 3 else "published")
        for week in ("2024-W52", "2025-W01", "2025-W02"):
            letters.ensure_letter(session, week, author="t")
    return db


def both(session, prepared: Prepared, params: dict | None = None):
    raw = prepared.run(session, params)
    core = list(session.connection().execute(prepared.query, params))
    return raw, core


def same(raw: list, core: list) -> None:
    assert [tuple(r) for r in raw] == [tuple(r) for r in core]
    for r, c in zip(raw, core, strict=True):
        assert [type(v) for v in r] == [type(v) for v in c]
        assert r._fields == tuple(c._fields)


def test_every_prepared_statement_answers_as_sqlalchemy_does(notebook):
    with notebook.read() as session:
        ids = [e.id for e in entry_rows.rows(session, browse.RECENT[("entry", False)],
                                             {"limit": 100})]
        assert len(ids) == 40
        for entry_id in (ids[0], ids[17], ids[-1], 10**9):
            same(*both(session, entry_rows.ONE, {"id": entry_id}))
        for entry_id in ids[::5]:
            entry = entry_rows.read(session, entry_id)
            assert isinstance(entry.date, dt.date) and isinstance(entry.updated_at, dt.datetime)
            keys = sorted(entries.keys_of(entry))
            for drafts in (True, False):
                for limit, offset in ((100, 0), (1, 1)):
                    same(*both(session, browse.BACKLINK_PAGE[drafts],
                               {"keys": keys, "id": entry.id, "limit": limit,
                                "offset": offset}))
                    same(*both(session, browse.NEWEST_BACKLINKS[drafts],
                               {"keys": keys, "id": entry.id, "limit": limit}))
                same(*both(session, browse.BACKLINK_COUNT[drafts], {"keys": keys, "id": entry.id}))
                same(*both(session, browse.NEIGHBOURS[drafts],
                           {"date": entry.date, "id": entry.id}))
            same(*both(session, browse.PASSED_OVER[entry.kind],
                       {"date": entry.date, "id": entry.id, "title": entry.title}))
        assert any(both(session, browse.BACKLINK_PAGE[False], {"keys": sorted(entries.keys_of(
            entry_rows.read(session, i))), "id": i, "limit": 100, "offset": 0})[0]
            for i in ids)  # some links exist
        for query in browse.RECENT.values():
            for limit in (0, 1, 15, 1000):
                same(*both(session, query, {"limit": limit}))
        for query in browse.TAGGED.values():
            for tag, limit, offset in (("gpu", 10, 0), ("notes", 5, 3), ("none", 5, 0)):
                same(*both(session, query, {"tag": tag, "limit": limit, "offset": offset}))
        for query in browse.OF_YEAR.values():
            for year in ("2024", "2025", "1999"):
                same(*both(session, query, {"first": f"{year}-W", "end": f"{year}-X"}))
        for week in ("2024-W52", "2025-W01", "2030-W01"):
            same(*both(session, letters.LETTER_ROW, {"week": week}))
            same(*both(session, letters.WEEK_ENTRIES, {"week": week}))
        same(*both(session, browse.MAX_ID))
    with notebook.engine.connect() as conn, notebook.read() as session:
        # a connection of its own, as the token lookup runs it
        assert [tuple(r) for r in entry_rows.ONE.run(conn, {"id": ids[3]})] == [
            tuple(entry_rows.read(session, ids[3]))]


def test_a_list_bound_as_json_is_not_sql(notebook):
    """Hostile text in a list travels as one JSON value: it matches nothing and runs
    nothing."""
    query = Prepared(sa.select(sa.literal_column("1").label("one")).where(
        sa.literal_column("'x'").in_(sa.bindparam("keys", expanding=True))))
    with notebook.read() as session:
        assert query.run(session, {"keys": ["') OR 1=1 --", '"]']}) == []
        assert [tuple(r) for r in query.run(session, {"keys": ["y", "x"]})] == [(1,)]
        assert query.run(session, {"keys": []}) == []


def test_a_statements_own_constants_are_sql_not_bound_values(notebook):
    """Bound, kind = 'week' or status = 'published' made SQLite compile the statement
    again on every run (both are conditions of partial indexes). As literals they answer
    the same, quotes and all, and a value that looks like a parameter stays text."""
    query = Prepared(sa.select(Entry.title, sa.literal("it's :id").label("said"))
                     .where(Entry.kind == "week", Entry.status != "draft",
                            Entry.title != "O'Brien", Entry.id > sa.bindparam("id"))
                     .order_by(Entry.id).limit(2))
    assert set(re.findall(r":(\w+)", query.sql)) == {"id"} and not query.defaults
    assert "'it''s :id'" in query.sql and "'week'" in query.sql
    with notebook.read() as session:
        raw, core = both(session, query, {"id": 0})
        same(raw, core)
        assert [r.said for r in raw] == ["it's :id"] * 2
        for prepared in (*browse.NEIGHBOURS.values(), *browse.NEWEST_BACKLINKS.values(),
                         *browse.PASSED_OVER.values(), *browse.RECENT.values()):
            assert not prepared.defaults and not re.search(r":(kind|status|param)_", prepared.sql)


def test_prepared_reads_the_sessions_own_transaction(notebook):
    """One snapshot per page: a row written by the session, not yet committed, is seen by
    the prepared statements it runs next."""
    with notebook.write() as session:
        entry = entries.create(session, author="t", date="2031-01-01", title="Unsaved")
        session.flush()
        assert entry_rows.read(session, entry.id).title == "Unsaved"
        session.rollback()
    with notebook.read() as session:
        assert not entry_rows.ONE.run(session, {"id": entry.id})


def test_insert_many_stores_what_sqlalchemys_insert_stores(db):
    """db.insert_many (the bulk import's rows, straight to sqlite3) against SQLAlchemy's
    own executemany of the same rows: the same stored text, byte for byte (dates,
    datetimes with and without microseconds, None, hostile text), read back the same."""
    from app.db import insert_many
    from app.models import Entry, Revision

    with db.write() as session:
        entry = entries.create(session, author="t", date=dt.date(2025, 1, 2), title="E",
                               body="b")
        rows = [{"entry_id": entry.id, "number": n, "date": dt.date(2025, 1, n),
                 "title": f"T{n} '); DROP TABLE entry; --", "body_md": "ü\x00b" if n % 2 else "",
                 "tags": "a b", "status": "draft", "author": "t", "note": "",
                 "created_at": dt.datetime(2025, 1, 2, 3, 4, 5, 6 * n if n % 2 else 0)}
                for n in range(2, 8)]
        insert_many(session, Revision.__table__, rows)
        session.execute(Revision.__table__.insert(), [{**r, "number": r["number"] + 10}
                                                      for r in rows])
        stored = session.connection().exec_driver_sql(
            "SELECT number, date, title, body_md, created_at, typeof(created_at) "
            "FROM revision WHERE number > 1 ORDER BY number").all()
        read = session.scalars(sa.select(Revision).where(Revision.number.between(2, 7))
                               .order_by(Revision.number)).all()
    ours, theirs = stored[:6], stored[6:]
    assert [r[1:] for r in ours] == [r[1:] for r in theirs]  # the same stored values
    assert {len(r[4]) for r in ours} == {26}  # .ffffff even at 0 microseconds, as SQLAlchemy
    assert [(r.date, r.created_at, r.body_md) for r in read] == [
        (row["date"], row["created_at"], row["body_md"]) for row in rows]
    with db.write() as session, pytest.raises(ValueError, match="created_at"):
        insert_many(session, Entry.__table__, [{"id": 99, "title": "no timestamps"}])
