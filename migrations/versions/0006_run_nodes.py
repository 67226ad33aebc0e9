"""runs that span hosts (issue 16): run.nodes (how many hosts lease it together, 1 for
every run so far) and run_node, one row per host of such a run (app/journal/gangs.py)

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("run") as batch:
        batch.add_column(sa.Column("nodes", sa.Integer, nullable=False, server_default="1"))
    op.create_table(
        "run_node",
        sa.Column("id", sa.Integer, nullable=False),
        sa.Column("run_id", sa.Integer, nullable=False),
        sa.Column("runner_id", sa.Integer, nullable=False),
        sa.Column("node_rank", sa.Integer, nullable=False),
        sa.Column("status", sa.String(12), nullable=False),
        sa.Column("address", sa.String(100), nullable=False),
        sa.Column("port", sa.Integer, nullable=False),
        sa.Column("lease_expires_at", sa.DateTime, nullable=True),
        sa.Column("joined_at", sa.DateTime, nullable=False),
        sa.Column("log_size", sa.Integer, nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["run.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["runner_id"], ["runner.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("run_id", "runner_id", name="uq_run_node_runner"),
    )
    op.create_index("ix_run_node_run_id", "run_node", ["run_id"])
    op.create_index("ix_run_node_runner", "run_node", ["runner_id", "status"])


def downgrade() -> None:
    op.drop_index("ix_run_node_runner", table_name="run_node")
    op.drop_index("ix_run_node_run_id", table_name="run_node")
    op.drop_table("run_node")
    with op.batch_alter_table("run") as batch:
        batch.drop_column("nodes")
