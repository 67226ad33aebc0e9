"""The recent entries' index (app/notebook/search_index.py, migration 0008): it holds
exactly the entries from its floor on and every letter, through saves, edits, deletes,
the floor moving up and imports; ranking scores a window from it when it holds the
window, with the scores bm25 gives there; and the migration fills it for a notebook that
had none."""

from __future__ import annotations

import sqlalchemy as sa

from app import create_app, upgrades
from app.notebook import entries, letters, search, search_index, transfer
from tests.helpers import at_revision

COLUMNS = "rowid, title, tags, body, kind"


def state(db) -> tuple[int, list, list]:
    """(floor, the recent index's rows, entry_fts's rows from the floor on and letters)."""
    with db.read() as session:
        floor = session.scalar(sa.text("SELECT floor FROM search_recent"))
        recent = session.execute(sa.text(
            f"SELECT {COLUMNS} FROM entry_fts_recent ORDER BY rowid")).all()
        whole = session.execute(sa.text(
            f"SELECT {COLUMNS} FROM entry_fts WHERE rowid >= :f OR kind = :k ORDER BY rowid"),
            {"f": floor, "k": search_index.LETTER_TOKEN}).all()
    return floor, recent, whole


def holds_its_part(db, keep: int) -> int:
    floor, recent, whole = state(db)
    assert recent == whole  # every entry from the floor on, and letters, as entry_fts has them
    with db.read() as session:
        newest = session.scalar(sa.text("SELECT max(rowid) FROM entry_fts")) or 0
    assert floor <= max(1, newest - keep + 1)  # at least the newest `keep`
    assert newest - floor + 1 <= 2 * keep  # at most twice that
    return floor


def create(db, n: int, start: int = 0, body: str = "nccl filler") -> list[int]:
    ids = []
    with db.write() as session:
        for i in range(start, start + n):
            entry = entries.create(session, author="x", date=f"2024-01-{1 + i % 28:02d}",
                                   title=f"Note {i}", body=body, tags=[])
            ids.append(entry.id)
    return ids


def test_saves_edits_and_deletes_keep_the_recent_index_in_step(db, monkeypatch):
    monkeypatch.setattr(search_index, "RECENT", 3)
    assert state(db)[0] == 1  # a new notebook: every entry
    floors = []
    for i in range(14):  # one save each: the floor moves up once the span passes 6
        create(db, 1, start=i)
        floors.append(holds_its_part(db, 3))
    assert floors == [1, 1, 1, 1, 1, 1, 5, 5, 5, 5, 9, 9, 9, 9]
    with db.write() as session:  # an edit inside the recent part, one below it, a delete
        for entry_id, body in ((13, "edited recent"), (2, "edited old")):
            entry = entries.get(session, entry_id)
            entries.update(session, entry, {"body": body}, author="x",
                           base_revision=entry.revision)
        entries.delete(session, entries.get(session, 12), base_revision=1)
    floor, recent, _ = state(db)
    holds_its_part(db, 3)
    assert floor == 9 and [r[0] for r in recent] == [9, 10, 11, 13, 14]
    assert "edited recent" in recent[3][3]
    assert [h.entry.id for h in _search(db, "edited")] == [13, 2]


def _search(db, q: str, **kw):
    with db.read() as session:
        return search.search(session, q, **kw).hits


def test_a_window_inside_the_recent_part_is_scored_there(db, monkeypatch):
    """In a notebook larger than the recent part, a common word's window is scored by bm25
    over entry_fts_recent (its statistics, same order of weights). With more matches than
    the window holds, the window stops at the floor: older matches follow newest first,
    unscored. Up to the window's size, every match is scored over entry_fts, wherever it
    lies."""
    monkeypatch.setattr(search_index, "RECENT", 4)
    monkeypatch.setattr(search.ranking, "WINDOW", 3)
    monkeypatch.setattr(search.ranking, "HEAD_WINDOW", 2)
    create(db, 10, body="other words")
    for i, body in enumerate(["nccl " + "pad " * 9, "nccl nccl nccl", "nccl pad"]):
        create(db, 1, start=20 + i, body=body)
    floor = holds_its_part(db, 4)

    def bm25(table: str, word: str) -> dict:
        with db.read() as session:
            return dict(session.execute(sa.text(
                f"SELECT rowid, bm25({table}, 10.0, 5.0, 1.0, 0.0) FROM {table} "
                f"WHERE {table} MATCH '{word}'")).all())
    hits = _search(db, "nccl")
    assert [h.entry.title for h in hits] == ["Note 21", "Note 22", "Note 20"]
    assert min(h.entry.id for h in hits) >= floor
    assert {h.entry.id: h.score for h in hits} == bm25("entry_fts_recent", "nccl")
    # "pad": 3 matches, one below the floor: all of them, scored over entry_fts
    with db.write() as session:
        entry = entries.get(session, 1)
        entries.update(session, entry, {"body": "pad"}, author="x", base_revision=1)
    assert 1 < floor
    assert {h.entry.id: h.score for h in _search(db, "pad")} == bm25("entry_fts", "pad")
    # a fourth: more than the window, so it stops at the floor; the two below it follow,
    # newest first
    with db.write() as session:
        entry = entries.get(session, 2)
        entries.update(session, entry, {"body": "pad pad pad pad"}, author="x",
                       base_revision=1)
    hits = _search(db, "pad")
    recent = bm25("entry_fts_recent", "pad")
    assert {h.entry.id: h.score for h in hits[:2]} == recent and set(recent) == {11, 13}
    assert [(h.entry.id, h.score) for h in hits[2:]] == [(2, 0.0), (1, 0.0)]


def test_an_import_fills_only_the_recent_part_it_keeps(tmp_path, monkeypatch):
    monkeypatch.setattr(search_index, "RECENT", 20)
    data = tmp_path / "data"
    app = create_app({"DATA_DIR": data, "DATABASE_URL": f"sqlite:///{data}/c.db",
                      "AUTH_MODE": "dev", "OWNERS": [], "VIEWERS": [], "TIMEZONE": "UTC",
                      "TESTING": True})
    db = app.extensions["db"]
    upgrades.upgrade(db, data / "backups")
    create(db, 5)
    source = tmp_path / "in"
    for i in range(70):
        path = source / f"2023/2023-05-{1 + i % 28:02d}-n{i}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"---\ntitle: Imported {i}\n---\nbody {i} nccl\n")
    transfer.import_folder(db, source, workers=0)
    assert holds_its_part(db, 20) == 75 - 20 + 1  # room made once, for the import's last id
    (source / "2023/2023-05-01-n0.md").write_text("---\ntitle: Imported 0\n---\nchanged\n")
    (source / "2023/2023-05-15-n70.md").write_text("---\ntitle: Imported 70\n---\nchanged\n")
    transfer.import_folder(db, source, workers=0)  # an old entry changed, a new one
    holds_its_part(db, 20)


def test_migration_0008_indexes_the_newest_entries_again(tmp_path):
    from alembic import command

    db, migrate = at_revision(tmp_path, "0007")
    n = search_index.RECENT + 50
    with db.engine.begin() as conn:  # an index as a 0007 notebook of n entries held it
        conn.exec_driver_sql("WITH RECURSIVE i(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM i "
                             f"WHERE n < {n}) INSERT INTO entry_fts ({COLUMNS}) "
                             "SELECT n, 'Note ' || n, '', 'word' || (n % 7), CASE WHEN n "
                             "IN (20, 40) THEN 'cpletter' ELSE '' END FROM i")  # 2 old letters
    assert upgrades.pending_migrations(db)[-5:] == ["0012", "0011", "0010", "0009", "0008"]
    upgrades.upgrade(db, tmp_path / "backups")
    floor, recent, whole = state(db)
    assert floor == 51 and recent == whole and len(recent) == search_index.RECENT + 2
    migrate(command.downgrade, "0007")
    with db.engine.connect() as conn:
        names = {r[0] for r in conn.exec_driver_sql("SELECT name FROM sqlite_master")}
        assert not {"entry_fts_recent", "search_recent"} & names
        assert conn.exec_driver_sql("SELECT count(*) FROM entry_fts").scalar() == n


def test_a_walk_crossing_the_floor_finds_what_entry_fts_alone_finds(db, monkeypatch):
    """The newest matches are walked in entry_fts_recent from its floor up and in entry_fts
    below it: the same ids in the same order as entry_fts alone, for every length, with a
    filter, a span and a prefix longer than the index keeps."""
    monkeypatch.setattr(search_index, "RECENT", 4)
    with db.write() as session:
        for i in range(20):
            entries.create(session, author="x", date=f"2024-02-{1 + i:02d}", title=f"N {i}",
                           body="checkpoint saved" if i % 3 else "checksum only",
                           tags=["pp"] if i % 2 else [])
    recent = holds_its_part(db, 4)
    assert recent > 1
    tagged = search.ranking.Keep(search.ranking.Checks(("pp",)))
    with db.read() as session:
        for fts, keep, spans in (('"check"*', None, [(None, None)]),
                                 ('"saved"', tagged, [(None, None)]),
                                 ('"check"*', None, [(3, 17), (1, 2)])):
            for n in range(1, 22):
                split = search.ranking._window(session, "entry_fts", fts, keep, spans, n,
                                               False, recent)
                alone = search.ranking._window(session, "entry_fts", fts, keep, spans, n,
                                               False)
                assert split == alone
    with db.read() as session:
        pages = [search.search(session, "check*", limit=4, offset=o).hits for o in (0, 4, 8)]
    assert len({h.entry.id for page in pages for h in page}) == 12


def test_rebuild_recent_fills_it_for_an_index_written_around_it(db, monkeypatch):
    """bench/serving.py seeds entry_fts straight; rebuild_recent then makes the recent part
    what index_rows would have left: the newest RECENT ids, as entry_fts holds them."""
    monkeypatch.setattr(search_index, "RECENT", 5)
    with db.write() as session:
        session.execute(search_index.INSERT_FTS, [
            {"id": i, "t": f"T {i}", "g": "", "b": "seeded", "k": ""} for i in range(1, 31)])
        search_index.rebuild_recent(session)
    floor = holds_its_part(db, 5)
    assert floor == 26 and len(state(db)[1]) == 5


def test_letters_stay_in_the_recent_index_and_kind_week_is_ranked_there(db, monkeypatch):
    """Every letter is in entry_fts_recent whatever its age, through the floor moving past
    it and its edits; kind:week walks and scores its window there (the letters' newest
    400 span the notebook), with the scores bm25 gives in that table."""
    monkeypatch.setattr(search_index, "RECENT", 3)
    weeks = ["2024-W02", "2024-W05", "2024-W09"]
    with db.write() as session:
        for week in weeks:
            letter, _ = letters.ensure_letter(session, week, author="x")
            entries.update(session, letter, {"body": "shard notes " + week}, author="x",
                           base_revision=letter.revision)
    create(db, 12, body="shard elsewhere")
    floor = holds_its_part(db, 3)
    _, recent, _ = state(db)
    assert floor > 3 and [r[0] for r in recent if r[4]] == [1, 2, 3]  # letters, below it
    with db.write() as session:  # an old letter edited: still there, as it reads now
        letter = entries.get(session, 1)
        entries.update(session, letter, {"body": "shard shard shard"}, author="x",
                       base_revision=letter.revision)
    holds_its_part(db, 3)
    hits = _search(db, "kind:week shard")
    assert [h.entry.id for h in hits] == [1, 3, 2]
    with db.read() as session:
        expected = dict(session.execute(sa.text(
            "SELECT rowid, bm25(entry_fts_recent, 10.0, 5.0, 1.0, 0.0) FROM entry_fts_recent "
            "WHERE entry_fts_recent MATCH 'shard AND kind : cpletter'")).all())
    assert {h.entry.id: h.score for h in hits} == expected
