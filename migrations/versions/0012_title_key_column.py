"""a title's link key, stored. A [[Title]] link is matched case-insensitively: the link's
key is lowered in Python (entries.link_key), but 0011 indexed SQLite's lower(title),
which lowers ASCII letters only, so an entry titled "Über" was never reached, by
[[Über]] or by [[über]] (the link showed as missing), although it listed those links
among its backlinks. The key is now a column written with the title (models.Entry
validates it), filled here for every entry, and indexed in place of lower(title).

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def _key(title: str) -> str:  # models.link_key as of this revision
    return " ".join(title.split()).lower()


def upgrade() -> None:
    op.add_column("entry", sa.Column("title_key", sa.String(200), nullable=False,
                                     server_default=""))
    conn = op.get_bind()
    titles = conn.execute(sa.text("SELECT id, title FROM entry")).all()
    if titles:
        conn.execute(sa.text("UPDATE entry SET title_key = :key WHERE id = :id"),
                     [{"id": i, "key": _key(title)} for i, title in titles])
    op.drop_index("ix_entry_title_key", table_name="entry")
    op.create_index("ix_entry_title_key", "entry", ["title_key", "date"])


def downgrade() -> None:
    op.drop_index("ix_entry_title_key", table_name="entry")
    op.execute("CREATE INDEX ix_entry_title_key ON entry (lower(title), date)")
    op.drop_column("entry", "title_key")  # ALTER TABLE DROP COLUMN: the table's triggers stay
