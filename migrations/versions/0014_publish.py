"""an entry's `publish` switch: true puts it on the public site `commonplace publish`
writes (app/publishing). Kept in every revision too, so history and restore carry it.
Every entry starts private.

Revision ID: 0014
Revises: 0012
Create Date: 2026-12-05
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    for table in ("entry", "revision"):
        op.add_column(table, sa.Column("publish", sa.Boolean(), nullable=False,
                                       server_default=sa.false()))


def downgrade() -> None:
    for table in ("entry", "revision"):
        op.drop_column(table, "publish")  # ALTER TABLE DROP COLUMN: the table's triggers stay
