"""search: a letter is findable inside the index (issue 14). entry_fts gains a fourth
column, kind, holding one token for a letter ("cpletter") and nothing for an entry, so
`kind:week shard` intersects the word's doclist with the letters' inside FTS5 instead of
walking every match of a common word to keep the few that are letters (16 of its 20 ms
at 100k entries). bm25 weighs the column 0; app/notebook/search.py writes the same token.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

OPTIONS = "tokenize = 'porter unicode61 remove_diacritics 2', prefix = '2 3 4'"
LETTER = "cpletter"


def _rebuild(columns: str, select: str) -> None:
    op.execute(f"CREATE VIRTUAL TABLE entry_fts_new USING fts5({columns}, {OPTIONS})")
    op.execute(f"INSERT INTO entry_fts_new (rowid, {columns}) {select}")
    op.execute("DROP TABLE entry_fts")
    op.execute("ALTER TABLE entry_fts_new RENAME TO entry_fts")
    op.execute("INSERT INTO entry_fts (entry_fts) VALUES ('optimize')")


def upgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    _rebuild("title, tags, body, kind",
             "SELECT f.rowid, f.title, f.tags, f.body, "
             f"CASE WHEN e.kind = 'week' THEN '{LETTER}' ELSE '' END "
             "FROM entry_fts AS f LEFT JOIN entry AS e ON e.id = f.rowid")


def downgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    _rebuild("title, tags, body", "SELECT rowid, title, tags, body FROM entry_fts")
