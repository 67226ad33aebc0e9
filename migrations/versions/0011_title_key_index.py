"""titles indexed as a link names them (issue 14). A `[[Title]]` link is resolved on
every save (entries.resolve: the newest entry whose lower(title) is the link's key), and
with no index on the title that walked ix_entry_date from the newest entry back until
it met one: at 100k entries 66 ms for a typical link of the corpus, 130-175 ms for one
to an old note or to no note yet, for each link of the note saved and of every note
re-rendered with it. This index is that lookup, newest first.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-02
"""

from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("CREATE INDEX ix_entry_title_key ON entry (lower(title), date)")


def downgrade() -> None:
    op.execute("DROP INDEX ix_entry_title_key")
