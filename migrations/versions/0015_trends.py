"""trends: a run's comparison key (the experiment and the parameters that say what is
measured, app/journal/run_metrics.comparison_key), indexed with its finish time, finds the
runs it is compared with; `judged_at` marks a run whose regressions were looked for; and
`alert` holds the regressions the owner's webhook is told about, delivered by the
scheduler once each, with its retries recorded.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-05
"""

import hashlib
import json

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

SAMPLING = frozenset({"steps", "iters", "seed", "measure_overhead"})  # as of this revision


def _key(experiment: str, params) -> str:  # run_metrics.comparison_key as of this revision
    kept = {k: v for k, v in params.items() if k not in SAMPLING} \
        if isinstance(params, dict) else {}
    text = json.dumps([experiment, kept], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def upgrade() -> None:
    op.add_column("run", sa.Column("param_key", sa.String(64), nullable=False,
                                   server_default=""))
    op.add_column("run", sa.Column("judged_at", sa.DateTime(), nullable=True))
    conn = op.get_bind()
    rows = conn.execute(sa.text("SELECT id, experiment, params FROM run")).all()
    if rows:
        conn.execute(sa.text("UPDATE run SET param_key = :key WHERE id = :id"),
                     [{"id": i, "key": _key(e, json.loads(p) if p else {})} for i, e, p in rows])
    # runs finished before trends existed are not judged again: no old regression is sent
    conn.execute(sa.text("UPDATE run SET judged_at = finished_at WHERE finished_at IS NOT NULL"))
    op.create_index("ix_run_param_key", "run", ["param_key", "finished_at"])
    op.create_index("ix_run_unjudged", "run", ["id"], sqlite_where=sa.text("judged_at IS NULL"))
    op.create_table(
        "alert",
        sa.Column("run_id", sa.Integer(), sa.ForeignKey("run.id", ondelete="CASCADE"),
                  primary_key=True),
        sa.Column("title", sa.String(200), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_at", sa.DateTime(), nullable=False),
        sa.Column("sent_at", sa.DateTime(), nullable=True),
        sa.Column("failed_at", sa.DateTime(), nullable=True),
        sa.Column("last_error", sa.String(500), nullable=False),
    )
    op.create_index("ix_alert_due", "alert", ["sent_at", "next_at"])


def downgrade() -> None:
    op.drop_index("ix_alert_due", table_name="alert")
    op.drop_table("alert")
    op.drop_index("ix_run_unjudged", table_name="run")
    op.drop_index("ix_run_param_key", table_name="run")
    op.drop_column("run", "judged_at")  # ALTER TABLE DROP COLUMN: the table's triggers stay
    op.drop_column("run", "param_key")
