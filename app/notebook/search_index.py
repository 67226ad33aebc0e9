"""The search index: what app/notebook/search.py and ranking.py read, kept in step with the
entries inside each saving transaction (entries.py one entry at a time, bulk_import.py a
batch at a time).

  entry_fts         every entry: title, tags, body as plain text, kind (a letter's token)
  entry_fts_heads   titles and tags alone, fed by triggers on entry (migration 0005)
  entry_fts_recent  the entries from search_recent.floor on, and every letter (migration
                    0008): bm25 scores a common word's newest matches (and kind:week's
                    letters) from here, counting its rows among 10,000-20,000 entries
                    instead of all of them (docs/PERFORMANCE.md, *Search*)
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.orm import Session

from app.models import Entry


def has_index(session: Session) -> bool:
    return session.get_bind().dialect.name == "sqlite"


# entry_fts.kind (migration 0007): one token for a letter, none for an entry, so kind:week
# is a doclist FTS5 intersects with the words'. A user who types the token finds letters.
LETTER_TOKEN = "cpletter"
INSERT_FTS = sa.text("INSERT INTO entry_fts (rowid, title, tags, body, kind) "
                     "VALUES (:id, :t, :g, :b, :k)")
DELETE_FTS = sa.text("DELETE FROM entry_fts WHERE rowid = :id")
INSERT_RECENT = sa.text("INSERT INTO entry_fts_recent (rowid, title, tags, body, kind) "
                        "VALUES (:id, :t, :g, :b, :k)")
DELETE_RECENT = sa.text("DELETE FROM entry_fts_recent WHERE rowid = :id")

# entry_fts_recent holds every entry from search_recent.floor on: the newest RECENT ids at
# least, and once the newest id is 2 x RECENT past the floor, the floor moves up to keep
# RECENT again (the older half deleted in that save's transaction, once in 10,000 new
# entries: the one slow save, docs/PERFORMANCE.md, *Search*). 400 matches of a word in 1
# entry in 25 lie within it; without a range filter, a window of more than that never
# reaches below it (ranking.py). Every letter is kept as well (one a week, ~2,600 in 50
# years): kind:week's window, the newest 400 letters, spans most of the notebook, and is
# walked and scored here.
RECENT = 10_000
FLOOR = "SELECT floor FROM search_recent"


def kind_token(kind: str) -> str:
    return LETTER_TOKEN if kind == "week" else ""


def recent_floor(session: Session) -> int | None:
    """The id from which entry_fts_recent holds every entry, letters or not (None: no
    index here)."""
    if not has_index(session):
        return None
    return session.connection().connection.dbapi_connection.execute(FLOOR).fetchone()[0]


def index_entry(session: Session, entry: Entry, text: str) -> None:
    index_rows(session, [{"id": entry.id, "t": entry.title, "g": entry.tags, "b": text,
                          "k": kind_token(entry.kind)}], replaced=[entry.id], last_id=entry.id)


def index_rows(session: Session, rows: list[dict], replaced: list[int], last_id: int) -> None:
    """rows ({id, t: title, g: tags, b: text, k: kind_token}) into the index, after the rows
    of the `replaced` ids are taken out; last_id is the highest id the entries will reach
    in this transaction (an import's last new entry), so the recent index makes room once
    and never takes rows it would delete again."""
    if not has_index(session):
        return
    floor = _make_room(session, last_id)
    if replaced:
        session.execute(DELETE_FTS, [{"id": i} for i in replaced])
        letters = {row["id"] for row in rows if row["k"] == LETTER_TOKEN}
        if recent := [{"id": i} for i in replaced if i >= floor or i in letters]:
            session.execute(DELETE_RECENT, recent)
    session.execute(INSERT_FTS, rows)
    if recent := [row for row in rows if row["id"] >= floor or row["k"] == LETTER_TOKEN]:
        session.execute(INSERT_RECENT, recent)


def _make_room(session: Session, last_id: int) -> int:
    floor = session.scalar(sa.text(FLOOR))
    if last_id - floor + 1 > 2 * RECENT:
        floor = last_id - RECENT + 1
        session.execute(sa.text("DELETE FROM entry_fts_recent WHERE rowid < :f AND kind != :k"),
                        {"f": floor, "k": LETTER_TOKEN})
        session.execute(sa.text("UPDATE search_recent SET floor = :f"), {"f": floor})
    return floor


def rebuild_recent(session: Session | sa.Connection) -> None:
    """entry_fts_recent filled afresh from entry_fts, its floor RECENT ids below the newest,
    and the letters: for an index written around index_rows (bench/serving.py seeds the
    tables directly)."""
    session.execute(sa.text("UPDATE search_recent SET floor = (SELECT max(1, coalesce("
                            f"max(rowid), 0) - {RECENT} + 1) FROM entry_fts)"))
    session.execute(sa.text("DELETE FROM entry_fts_recent"))
    session.execute(sa.text(f"INSERT INTO entry_fts_recent (rowid, title, tags, body, kind) "
                            f"SELECT rowid, title, tags, body, kind FROM entry_fts "
                            f"WHERE rowid >= ({FLOOR}) OR kind = '{LETTER_TOKEN}'"))


def remove_entry(session: Session, entry_id: int) -> None:
    if has_index(session):
        session.execute(DELETE_FTS, {"id": entry_id})
        session.execute(DELETE_RECENT, {"id": entry_id})


# -- bulk loading (app/notebook/bulk_import.py) -------------------------------------------
#
# FTS5 writes each transaction's terms as a new segment and, by default, merges a level
# once it holds 4 segments ('automerge'): an import in batches rewrote the index over and
# over (with the prefix indexes, every term four times). Merging at 16 while loading, then
# merging everything into one segment at the end, costs less, and the index answers faster
# than either (bench/fts_loading.py; docs/PERFORMANCE.md, *Search*).

FTS_TABLES = ("entry_fts", "entry_fts_heads", "entry_fts_recent")
USUAL_AUTOMERGE = 4  # FTS5's default
LOADING_AUTOMERGE = 16
MERGE_PAGES = 1000  # pages of merge work per write transaction: the web writes in between


def _command(session: Session, table: str, name: str, value: int) -> None:
    """One of FTS5's special INSERTs: ('automerge', n), ('merge', n)."""
    session.execute(sa.text(f"INSERT INTO {table} ({table}, rank) "
                            f"VALUES ('{name}', {int(value)})"))


def _set_automerge(session: Session, value: int) -> None:
    for table in FTS_TABLES:
        _command(session, table, "automerge", value)


def start_loading(session: Session) -> None:
    """Inside the first batch's transaction of an import of many batches: merge less while
    they come. (One batch is one segment: FTS5's usual merging is right for it.)"""
    if has_index(session):
        _set_automerge(session, LOADING_AUTOMERGE)


def _loading(session: Session) -> bool:
    """Whether an import set the loading automerge and has not finished (its config row;
    FTS5 writes none while the default holds)."""
    return any(session.scalar(sa.text(f"SELECT v FROM {table}_config WHERE k = 'automerge'"))
               == LOADING_AUTOMERGE for table in FTS_TABLES)


def finish_loading(db) -> None:
    """After the last batch of an import that started loading (or on any re-run after such
    an import was interrupted): the usual automerge back, then every segment merged into
    one, MERGE_PAGES at a time ('merge' with a negative count: FTS5's 'optimize', in
    steps), until a step changes fewer than 2 rows (FTS5's own test that nothing was left
    to do). An import of a few files leaves the index as it is: merging a whole large
    index takes seconds (docs/PERFORMANCE.md, *Search*)."""
    with db.write() as session:
        if not has_index(session) or not _loading(session):
            return
        _set_automerge(session, USUAL_AUTOMERGE)
    for table in FTS_TABLES:
        while True:
            with db.write() as session:
                connection = session.connection().connection.dbapi_connection
                before = connection.total_changes
                _command(session, table, "merge", -MERGE_PAGES)
                if connection.total_changes - before < 2:
                    break
