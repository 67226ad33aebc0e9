"""A `[[Title]]` link's target (entries.resolve: the newest entry whose title_key is the
link's key) is one seek of ix_entry_title_key, not a walk of the entries from the newest
back until one matches (at 100k entries that walk took 66 ms for a typical link, up to
175 ms for a link to an old note or to none, on every save). The key is the title as
entries.link_key lowers it, Unicode and all: 0011 indexed SQLite's lower(title), which
lowers ASCII only, so a title like "Über" was reached by no link (migration 0012)."""

from __future__ import annotations

import sqlite3

import sqlalchemy as sa

from app.notebook import browse, entries
from tests.helpers import OLD_ENTRY, at_revision, create_entry


def resolved_with_plans(db, target: str):
    """entries.resolve's answer, and the query plan of each statement it ran."""
    statements = []

    def seen(conn, cursor, statement, parameters, context, executemany):
        statements.append((statement, parameters))

    sa.event.listen(db.engine, "before_cursor_execute", seen)
    try:
        with db.read() as session:
            found = entries.resolve(session, target)
            found = found and (found.id, found.date.isoformat())
    finally:
        sa.event.remove(db.engine, "before_cursor_execute", seen)
    with sqlite3.connect(db.sqlite_path) as conn:
        plans = [" / ".join(row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params))
                 for sql, params in statements if sql.lstrip().upper().startswith("SELECT")]
    return found, plans


def test_a_title_link_is_one_seek_of_its_index_and_finds_the_newest(client, db):
    older = create_entry(client, title="Shard plan", date="2024-01-05", body="first")
    newer = create_entry(client, title="shard PLAN", date="2024-03-05", body="second")
    create_entry(client, title="Other", date="2024-06-01", body="unrelated")
    for target in ("Shard Plan", "  shard   plan "):
        found, plans = resolved_with_plans(db, target)
        assert found == (newer, "2024-03-05")
        # (first a seek for a file of that name: note_paths, then the title's)
        assert plans and all(("ix_entry_title_key" in plan or "ix_entry_name_key" in plan)
                             and "TEMP B-TREE" not in plan for plan in plans), plans
    assert resolved_with_plans(db, "Nobody wrote this")[0] is None
    # a note linking to the title links to the newest of the two
    linker = create_entry(client, title="Linker", date="2024-07-01", body="see [[Shard plan]]")
    page = client.get(f"/entries/{linker}", follow_redirects=True).text
    assert f'href="/entries/{newer}/' in page and f'href="/entries/{older}/' not in page


def test_a_title_beyond_ascii_is_reached_whatever_its_case(client, db):
    target = create_entry(client, title="Über  Pipelines", date="2024-02-01", body="x")
    greek = create_entry(client, title="Δ-debugging", date="2024-02-02", body="y")
    linker = create_entry(client, title="Linker", date="2024-03-01",
                          body="[[über pipelines]], [[ÜBER PIPELINES|loud]], [[δ-DEBUGGING]]")
    for text, reached in (("Über Pipelines", target), ("über   pipelines", target),
                          ("δ-Debugging", greek)):
        assert resolved_with_plans(db, text)[0][0] == reached
    page = client.get(f"/entries/{linker}", follow_redirects=True).text
    assert page.count(f'href="/entries/{target}/') == 2 and "wikilink missing" not in page
    assert f'href="/entries/{greek}/' in page
    with db.read() as session:  # and each lists the linker among its backlinks
        for reached in (target, greek):
            found, total = browse.newest_backlinks(session, entries.get(session, reached), 10,
                                                   include_drafts=True)
            assert [b.id for b in found] == [linker] and total == 1
    # renamed, the key follows the title: the links to the old title go missing
    with db.write() as session:
        entry = entries.get(session, target)
        entries.update(session, entry, {"title": "Pipelines"}, base_revision=entry.revision,
                       author="t")
        assert entry.title_key == "pipelines"
    assert resolved_with_plans(db, "über pipelines")[0] is None
    assert "wikilink missing" in client.get(f"/entries/{linker}", follow_redirects=True).text


def test_migration_0012_keys_every_title_and_0011_indexes_them(tmp_path):
    from alembic import command

    from app import upgrades

    db, migrate = at_revision(tmp_path, "0010")
    with sqlite3.connect(db.sqlite_path) as conn:  # a notebook as 0010 left it
        conn.executemany(OLD_ENTRY, [(1, "published"), (2, "published")])
        conn.execute("UPDATE entry SET title = 'Über  Alles', date = '2024-01-02' WHERE id = 2")
    assert upgrades.pending_migrations(db)[-2:] == ["0012", "0011"]  # and any newer
    upgrades.upgrade(db, tmp_path / "backups")
    with sqlite3.connect(db.sqlite_path) as conn:
        assert conn.execute("SELECT id, title_key FROM entry ORDER BY id").fetchall() == [
            (1, "old"), (2, "über alles")]
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        triggers = conn.execute("SELECT count(*) FROM sqlite_master WHERE type = 'trigger' "
                                "AND tbl_name = 'entry'").fetchone()[0]
    found, plans = resolved_with_plans(db, "OLD")
    assert found == (1, "2024-01-01") and "ix_entry_title_key" in plans[-1]
    assert resolved_with_plans(db, "ÜBER ALLES")[0] == (2, "2024-01-02")
    migrate(command.downgrade, "0011")  # lower(title) indexed again, the column gone
    with sqlite3.connect(db.sqlite_path) as conn:
        columns = [row[1] for row in conn.execute("PRAGMA table_info(entry)")]
        assert "title_key" not in columns and "title" in columns
        assert conn.execute("SELECT sql FROM sqlite_master WHERE name = "
                            "'ix_entry_title_key'").fetchone() == (
            "CREATE INDEX ix_entry_title_key ON entry (lower(title), date)",)
        assert conn.execute("SELECT count(*) FROM sqlite_master WHERE type = 'trigger' AND "
                            "tbl_name = 'entry'").fetchone()[0] == triggers  # none lost
    migrate(command.downgrade, "0010")
    with sqlite3.connect(db.sqlite_path) as conn:
        assert not conn.execute("SELECT 1 FROM sqlite_master WHERE name = "
                                "'ix_entry_title_key'").fetchall()
