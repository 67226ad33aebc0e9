"""notebook: entries, revisions, links, tags, attachments, tokens, settings, search index

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "entry",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("kind", sa.String(8), nullable=False),
        sa.Column("date", sa.Date, nullable=False),
        sa.Column("iso_week", sa.String(8), nullable=False),
        sa.Column("title", sa.String(200), nullable=False),
        sa.Column("slug", sa.String(120), nullable=False),
        sa.Column("body_md", sa.Text, nullable=False),
        sa.Column("body_html", sa.Text, nullable=False),
        sa.Column("toc_html", sa.Text, nullable=False),
        sa.Column("tags", sa.String(1000), nullable=False),
        sa.Column("status", sa.String(10), nullable=False),
        sa.Column("revision", sa.Integer, nullable=False),
        sa.Column("created_at", sa.DateTime, nullable=False),
        sa.Column("updated_at", sa.DateTime, nullable=False),
        sa.CheckConstraint("kind IN ('entry', 'week')", name="ck_entry_kind"),
        sa.CheckConstraint("status IN ('draft', 'published')", name="ck_entry_status"),
    )
    op.create_index("ix_entry_iso_week", "entry", ["iso_week"])
    op.create_index("ix_entry_date", "entry", ["date", "id"])
    op.create_index("ix_entry_kind_date", "entry", ["kind", "date"])
    op.create_index(
        "ix_entry_one_letter_per_week", "entry", ["iso_week"], unique=True,
        sqlite_where=sa.text("kind = 'week'"), postgresql_where=sa.text("kind = 'week'"),
    )
    op.create_table(
        "revision",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("entry_id", sa.Integer, sa.ForeignKey("entry.id", ondelete="CASCADE"),
                  nullable=False),
        sa.Column("number", sa.Integer, nullable=False),
        sa.Column("date", sa.Date, nullable=False),
        sa.Column("title", sa.String(200), nullable=False),
        sa.Column("body_md", sa.Text, nullable=False),
        sa.Column("tags", sa.String(1000), nullable=False),
        sa.Column("status", sa.String(10), nullable=False),
        sa.Column("author", sa.String(200), nullable=False),
        sa.Column("note", sa.String(200), nullable=False),
        sa.Column("created_at", sa.DateTime, nullable=False),
        sa.UniqueConstraint("entry_id", "number"),
    )
    op.create_table(
        "link",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("source_id", sa.Integer, sa.ForeignKey("entry.id", ondelete="CASCADE"),
                  nullable=False),
        sa.Column("target_key", sa.String(200), nullable=False),
        sa.Column("text", sa.String(200), nullable=False),
        sa.Column("context", sa.String(400), nullable=False),
    )
    op.create_index("ix_link_source_id", "link", ["source_id"])
    op.create_index("ix_link_target_key", "link", ["target_key"])
    op.create_table(
        "entry_tag",
        sa.Column("entry_id", sa.Integer, sa.ForeignKey("entry.id", ondelete="CASCADE"),
                  primary_key=True),
        sa.Column("tag", sa.String(100), primary_key=True),
    )
    op.create_index("ix_entry_tag_tag", "entry_tag", ["tag"])
    op.create_table(
        "attachment",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("entry_id", sa.Integer, sa.ForeignKey("entry.id", ondelete="SET NULL")),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("filename", sa.String(200), nullable=False),
        sa.Column("content_type", sa.String(100), nullable=False),
        sa.Column("size", sa.Integer, nullable=False),
        sa.Column("created_at", sa.DateTime, nullable=False),
    )
    op.create_index("ix_attachment_entry_id", "attachment", ["entry_id"])
    op.create_index("ix_attachment_sha256", "attachment", ["sha256"])
    op.create_table(
        "token",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.String(100), nullable=False, unique=True),
        sa.Column("role", sa.String(10), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("created_at", sa.DateTime, nullable=False),
        sa.Column("last_used_at", sa.DateTime),
        sa.Column("revoked_at", sa.DateTime),
        sa.CheckConstraint("role IN ('owner', 'viewer', 'runner', 'feed')", name="ck_token_role"),
    )
    op.create_table(
        "setting",
        sa.Column("key", sa.String(100), primary_key=True),
        sa.Column("value", sa.Text, nullable=False),
    )
    if op.get_bind().dialect.name == "sqlite":
        # Full-text index, rowid = entry.id; kept in sync by app/notebook/search.py in the same
        # transaction as every save. Porter stemming so "measure" finds "measured".
        op.execute(
            "CREATE VIRTUAL TABLE entry_fts USING fts5("
            "title, tags, body, tokenize = 'porter unicode61 remove_diacritics 2')"
        )


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute("DROP TABLE entry_fts")
    for table in ("setting", "token", "attachment", "entry_tag", "link", "revision", "entry"):
        op.drop_table(table)
