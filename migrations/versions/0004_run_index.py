"""runs you can query: run_param and run_metric (narrow indexed rows of each run's
parameters and scalar results), filled for the runs already there; run indexes on
created_at (the week filter) and parent_id (a run's reruns)

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01

The backfill reads each run's params and result once, in batches, and derives the rows
with app/journal/run_metrics.py, the same functions the runs' own writes use.
"""

import sqlalchemy as sa
from alembic import op

from app.journal.run_metrics import derive, param_rows

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

BATCH = 500


def upgrade() -> None:
    op.create_table(
        "run_param",
        sa.Column("run_id", sa.Integer, nullable=False),
        sa.Column("key", sa.String(100), nullable=False),
        sa.Column("value", sa.String(200), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["run.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("run_id", "key", "value"),
    )
    op.create_index("ix_run_param_key_value", "run_param", ["key", "value", "run_id"])
    op.create_table(
        "run_metric",
        sa.Column("run_id", sa.Integer, nullable=False),
        sa.Column("key", sa.String(100), nullable=False),
        sa.Column("value", sa.Float, nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["run.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("run_id", "key"),
    )
    op.create_index("ix_run_metric_key_value", "run_metric", ["key", "value", "run_id"])
    op.create_index("ix_run_created_at", "run", ["created_at"])
    op.create_index("ix_run_parent_id", "run", ["parent_id"])
    backfill(op.get_bind())


def backfill(conn) -> None:
    run = sa.table("run", sa.column("id", sa.Integer), sa.column("params", sa.JSON),
                   sa.column("result", sa.JSON))
    params = sa.table("run_param", sa.column("run_id"), sa.column("key"), sa.column("value"))
    metrics = sa.table("run_metric", sa.column("run_id"), sa.column("key"), sa.column("value"))
    last = 0
    while True:
        batch = conn.execute(sa.select(run.c.id, run.c.params, run.c.result)
                             .where(run.c.id > last).order_by(run.c.id).limit(BATCH)).all()
        if not batch:
            return
        param_batch, metric_batch = [], []
        for run_id, run_params, result in batch:
            param_batch += [{"run_id": run_id, "key": k, "value": v}
                            for k, v in param_rows(run_params)]
            metric_batch += [{"run_id": run_id, "key": k, "value": v}
                             for k, v in derive(result).items()]
        if param_batch:
            conn.execute(sa.insert(params), param_batch)
        if metric_batch:
            conn.execute(sa.insert(metrics), metric_batch)
        last = batch[-1][0]


def downgrade() -> None:
    op.drop_index("ix_run_parent_id", table_name="run")
    op.drop_index("ix_run_created_at", table_name="run")
    op.drop_index("ix_run_metric_key_value", table_name="run_metric")
    op.drop_table("run_metric")
    op.drop_index("ix_run_param_key_value", table_name="run_param")
    op.drop_table("run_param")
