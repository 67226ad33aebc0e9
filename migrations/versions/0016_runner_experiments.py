"""runner.experiments: the owner's own experiments a runner reported when it registered
(their declarations, and the files it found broken, with why); the catalogue shows them
and a run of one goes only to a runner that reported it (app/journal/catalogue.py).

Revision ID: 0016
Revises: 0014
Create Date: 2026-12-05
"""

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("runner", sa.Column("experiments", sa.JSON(), nullable=False,
                                      server_default="[]"))


def downgrade() -> None:
    op.drop_column("runner", "experiments")
