"""search: the newest entries indexed again on their own (issue 14). bm25 first counts,
over the whole index, the rows each query word is in: 5 ms for a word in most of 100k
entries, per statement, however few rows it then scores. A common word's ranked window
(its newest 400 matches) lies among the newest entries, so its scores are taken from
entry_fts_recent, which holds the entries from search_recent.floor on (between 10,000
and 20,000 of them; every entry of a smaller notebook) and counts them in ~1 ms. It
holds every letter too: kind:week's window, the newest 400 letters, spans the notebook.
app/notebook/search.py keeps both in step.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

OPTIONS = "tokenize = 'porter unicode61 remove_diacritics 2', prefix = '2 3 4'"
KEEP = 10_000  # search_index.RECENT: the newest this many ids at least
LETTER = "cpletter"  # search_index.LETTER_TOKEN


def upgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    op.execute("CREATE TABLE search_recent (floor INTEGER NOT NULL)")
    op.execute("INSERT INTO search_recent (floor) "
               f"SELECT max(1, coalesce(max(rowid), 0) - {KEEP} + 1) FROM entry_fts")
    op.execute(f"CREATE VIRTUAL TABLE entry_fts_recent USING fts5(title, tags, body, kind, "
               f"{OPTIONS})")
    op.execute("INSERT INTO entry_fts_recent (rowid, title, tags, body, kind) "
               "SELECT rowid, title, tags, body, kind FROM entry_fts "
               f"WHERE rowid >= (SELECT floor FROM search_recent) OR kind = '{LETTER}'")
    op.execute("INSERT INTO entry_fts_recent (entry_fts_recent) VALUES ('optimize')")


def downgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    op.execute("DROP TABLE entry_fts_recent")
    op.execute("DROP TABLE search_recent")
