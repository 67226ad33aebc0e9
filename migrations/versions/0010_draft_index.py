"""the drafts, indexed (issue 14). What a reader who may not see drafts is shown counts
only published entries: the site map's years and tags, a tag page's total. Counted
directly, that walked every entry's row (status is not in an index) or looked each
tagged entry up: 180 ms for the years and 690 ms for the tags at 100k entries, after
every save, for every such reader's first view. They are now every entry's counts (from
covering indexes) less the drafts' (app/notebook/browse.py), and the drafts are few:
this partial index holds only them, with the week the years are read from.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-02
"""

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("CREATE INDEX ix_entry_draft_week ON entry (iso_week) WHERE status = 'draft'")


def downgrade() -> None:
    op.execute("DROP INDEX ix_entry_draft_week")
