"""What a reader who may not see drafts is shown counts only published entries: the site
map's years and tags, a tag page's total. They are every entry's counts less the drafts'
(app/notebook/browse.py), the drafts read from their own partial index (migration 0010),
so they must equal the published entries counted directly, whatever moves between draft
and published."""

from __future__ import annotations

import sqlite3

from app.notebook import browse
from app.notebook.browse import DRAFT_TAGS, DRAFT_YEARS
from tests.helpers import AS_OWNER, AS_VIEWER, OLD_ENTRY, at_revision, entry_form

DIRECT_TAGS = ("SELECT entry_tag.tag, count(*) FROM entry_tag JOIN entry ON entry.id = "
               "entry_tag.entry_id WHERE entry.status = 'published' GROUP BY entry_tag.tag "
               "ORDER BY count(*) DESC, entry_tag.tag")
DIRECT_YEARS = ("SELECT substr(iso_week, 1, 4) AS y, count(*) FROM entry "
                "WHERE status = 'published' GROUP BY y ORDER BY y DESC")


def direct(db, sql: str) -> list[tuple[str, int]]:
    with sqlite3.connect(db.sqlite_path) as conn:
        return [tuple(row) for row in conn.execute(sql)]


def counted(db, include_drafts: bool) -> tuple[list, list]:
    with db.read() as session:
        return (browse.tag_counts(session, include_drafts=include_drafts),
                browse.years(session, include_drafts=include_drafts))


def save(client, **fields) -> int:
    r = client.post("/entries/new", data=entry_form(**fields), headers=AS_OWNER)
    assert r.status_code == 303, r.text
    return int(r.location.split("/")[2])


def test_published_counts_are_the_published_entries_whatever_moves(served):
    client, db = served.client, served.db
    save(client, tags="gpu pipeline")
    save(client, tags="gpu", date="2023-06-01")
    hidden = save(client, tags="gpu secret", status="draft")  # "secret": drafts only
    save(client, tags="later", date="2021-02-03", status="draft")  # 2021: drafts only
    tags, years = counted(db, include_drafts=False)
    assert tags == direct(db, DIRECT_TAGS) == [("gpu", 2), ("pipeline", 1)]
    assert years == direct(db, DIRECT_YEARS) == [("2024", 1), ("2023", 1)]
    assert counted(db, include_drafts=True) == (
        [("gpu", 3), ("later", 1), ("pipeline", 1), ("secret", 1)],
        [("2024", 2), ("2023", 1), ("2021", 1)])

    viewer = client.get("/sitemap", headers=AS_VIEWER).text
    owner = client.get("/sitemap", headers=AS_OWNER).text
    assert "/tags/secret" not in viewer and "/tags/secret" in owner

    # published through the web: its tags and year count, the kept counts are not reused
    r = client.post(f"/entries/{hidden}/edit", headers=AS_OWNER,
                    data={**entry_form(tags="gpu secret"), "base_revision": "1"})
    assert r.status_code == 303, r.text
    tags, years = counted(db, include_drafts=False)
    assert tags == direct(db, DIRECT_TAGS) == [("gpu", 3), ("pipeline", 1), ("secret", 1)]
    assert years == direct(db, DIRECT_YEARS) == [("2024", 2), ("2023", 1)]
    with sqlite3.connect(db.sqlite_path) as conn:  # back to a draft by another process
        conn.execute("UPDATE entry SET status = 'draft' WHERE id = ?", (hidden,))
        assert counted(db, include_drafts=False)[0] == direct(db, DIRECT_TAGS)
        conn.commit()
        conn.execute("PRAGMA foreign_keys = ON")  # as the app's connections: tags go too
        conn.execute("DELETE FROM entry WHERE id = ?", (hidden,))
    assert counted(db, include_drafts=False) == (direct(db, DIRECT_TAGS),
                                                 direct(db, DIRECT_YEARS))


def test_the_drafts_are_read_from_their_partial_index(db):
    with sqlite3.connect(db.sqlite_path) as conn:
        for query in (DRAFT_YEARS, DRAFT_TAGS):
            compiled = query.compile(dialect=db.engine.dialect)
            params = [compiled.params[name] for name in compiled.positiontup]
            plan = " / ".join(row[3] for row in
                              conn.execute(f"EXPLAIN QUERY PLAN {compiled}", params))
            # never a walk over every entry, nor a lookup of every tagged entry
            assert "ix_entry_draft_week" in plan, plan
            assert "ix_entry_tag_tag" not in plan and "SCAN entry_tag" not in plan, plan


def test_migration_0010_indexes_an_existing_notebooks_drafts_and_goes_away_down(tmp_path):
    from alembic import command

    from app import upgrades

    db, migrate = at_revision(tmp_path, "0009")
    with sqlite3.connect(db.sqlite_path) as conn:  # a notebook as 0009 left it
        conn.executemany(OLD_ENTRY, [(1, "draft"), (2, "published")])
    assert upgrades.pending_migrations(db)[-3:] == ["0012", "0011", "0010"]  # and any newer
    upgrades.upgrade(db, tmp_path / "backups")
    with sqlite3.connect(db.sqlite_path) as conn:
        assert conn.execute("SELECT count(*) FROM entry INDEXED BY ix_entry_draft_week "
                            "WHERE status = 'draft'").fetchone() == (1,)
    with db.read() as session:
        assert browse.years(session, include_drafts=False) == [("2024", 1)]
    migrate(command.downgrade, "0009")
    with sqlite3.connect(db.sqlite_path) as conn:
        assert not conn.execute("SELECT 1 FROM sqlite_master WHERE name = "
                                "'ix_entry_draft_week'").fetchall()
