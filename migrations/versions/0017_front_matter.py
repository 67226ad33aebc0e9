"""an entry's front matter that the notebook has no field for (`entry.front_matter`, YAML):
kept from an imported file and written back in its file (mirror.to_text), so notes leave
again with every key they came with. NULL for an entry with none (all of them, at first).

Revision ID: 0017
Revises: 0014
Create Date: 2026-12-05
"""

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("entry", sa.Column("front_matter", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("entry", "front_matter")  # ALTER TABLE DROP COLUMN: the triggers stay
