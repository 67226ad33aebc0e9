"""search index for 100k entries (issue 14): prefix indexes on entry_fts, so `pi*` and
`sch*` read one doclist instead of merging every term that starts so; and entry_fts_heads,
an index of titles and tags alone (external content: the entry table, kept by triggers),
so "which matches have the word in the title or tags" reads short doclists, not the body's

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

TOKENIZE = "tokenize = 'porter unicode61 remove_diacritics 2'"
TRIGGERS = {
    "entry_fts_heads_insert": "AFTER INSERT ON entry BEGIN "
    "INSERT INTO entry_fts_heads (rowid, title, tags) VALUES (new.id, new.title, new.tags); END",
    "entry_fts_heads_delete": "AFTER DELETE ON entry BEGIN "
    "INSERT INTO entry_fts_heads (entry_fts_heads, rowid, title, tags) "
    "VALUES ('delete', old.id, old.title, old.tags); END",
    "entry_fts_heads_update": "AFTER UPDATE OF title, tags ON entry BEGIN "
    "INSERT INTO entry_fts_heads (entry_fts_heads, rowid, title, tags) "
    "VALUES ('delete', old.id, old.title, old.tags); "
    "INSERT INTO entry_fts_heads (rowid, title, tags) VALUES (new.id, new.title, new.tags); END",
}


def _rebuild(options: str) -> None:
    op.execute(f"CREATE VIRTUAL TABLE entry_fts_new USING fts5(title, tags, body, {options})")
    op.execute("INSERT INTO entry_fts_new (rowid, title, tags, body) "
               "SELECT rowid, title, tags, body FROM entry_fts")
    op.execute("DROP TABLE entry_fts")
    op.execute("ALTER TABLE entry_fts_new RENAME TO entry_fts")
    op.execute("INSERT INTO entry_fts (entry_fts) VALUES ('optimize')")


def upgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    _rebuild(TOKENIZE + ", prefix = '2 3 4'")
    op.execute("CREATE VIRTUAL TABLE entry_fts_heads USING fts5(title, tags, content = 'entry', "
               f"content_rowid = 'id', {TOKENIZE}, prefix = '2 3 4')")
    for name, body in TRIGGERS.items():
        op.execute(f"CREATE TRIGGER {name} {body}")
    op.execute("INSERT INTO entry_fts_heads (entry_fts_heads) VALUES ('rebuild')")


def downgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    for name in TRIGGERS:
        op.execute(f"DROP TRIGGER {name}")
    op.execute("DROP TABLE entry_fts_heads")
    _rebuild(TOKENIZE)
