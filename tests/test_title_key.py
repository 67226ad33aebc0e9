"""A `[[Title]]` link's target (entries.resolve: the newest entry whose lower(title) is the
link's key) is found through ix_entry_title_key (migration 0011), not by walking the
entries from the newest back until one matches: a save resolves every link of its note,
and at 100k entries that walk took 66 ms for a typical link and up to 175 ms for a link
to an old note or to none."""

from __future__ import annotations

import sqlite3

import sqlalchemy as sa

from app.notebook import entries
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
        assert plans and all("ix_entry_title_key" in plan and "TEMP B-TREE" not in plan
                             for plan in plans), plans
    assert resolved_with_plans(db, "Nobody wrote this")[0] is None
    # a note linking to the title links to the newest of the two, as before the index
    linker = create_entry(client, title="Linker", date="2024-07-01", body="see [[Shard plan]]")
    page = client.get(f"/entries/{linker}", follow_redirects=True).text
    assert f'href="/entries/{newer}/' in page and f'href="/entries/{older}/' not in page


def test_migration_0011_indexes_an_existing_notebooks_titles_and_goes_away_down(tmp_path):
    from alembic import command

    from app import upgrades

    db, migrate = at_revision(tmp_path, "0010")
    with sqlite3.connect(db.sqlite_path) as conn:  # a notebook as 0010 left it
        conn.executemany(OLD_ENTRY, [(1, "published")])
    assert upgrades.pending_migrations(db) == ["0011"]
    upgrades.upgrade(db, tmp_path / "backups")
    found, plans = resolved_with_plans(db, "OLD")
    assert found == (1, "2024-01-01") and "ix_entry_title_key" in plans[0]
    migrate(command.downgrade, "0010")
    with sqlite3.connect(db.sqlite_path) as conn:
        assert not conn.execute("SELECT 1 FROM sqlite_master WHERE name = "
                                "'ix_entry_title_key'").fetchall()
    assert resolved_with_plans(db, "old")[0] == (1, "2024-01-01")
