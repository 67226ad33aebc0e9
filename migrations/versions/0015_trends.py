"""trends: a run's comparison key (the experiment and the parameters that say what is
measured, app/journal/run_metrics.comparison_key), indexed, finds the runs it is compared
with; `judgement` records each successful run whose regressions were looked for, with
the alert to deliver to the owner's webhook and how its delivery went (app/models/journal.py).

Runs finished before this revision get no judgement: the judge only looks at runs that
finished lately (app/journal/alerts.py), so no old regression is sent.

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
    conn = op.get_bind()
    rows = conn.execute(sa.text("SELECT id, experiment, params FROM run")).all()
    if rows:
        conn.execute(sa.text("UPDATE run SET param_key = :key WHERE id = :id"),
                     [{"id": i, "key": _key(e, json.loads(p) if p else {})} for i, e, p in rows])
    op.create_index("ix_run_param_key", "run", ["param_key"])
    op.create_index("ix_run_finished_at", "run", ["finished_at"])
    op.create_table(
        "judgement",
        sa.Column("run_id", sa.Integer(), sa.ForeignKey("run.id", ondelete="CASCADE"),
                  primary_key=True),
        sa.Column("judged_at", sa.DateTime(), nullable=False),
        sa.Column("regressions", sa.Integer(), nullable=False),
        sa.Column("title", sa.String(200), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("next_at", sa.DateTime(), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("sent_at", sa.DateTime(), nullable=True),
        sa.Column("failed_at", sa.DateTime(), nullable=True),
        sa.Column("last_error", sa.String(500), nullable=False),
    )
    op.create_index("ix_judgement_due", "judgement", ["next_at"], sqlite_where=sa.text(
        "next_at IS NOT NULL AND sent_at IS NULL AND failed_at IS NULL"))


def downgrade() -> None:
    op.drop_index("ix_judgement_due", table_name="judgement")
    op.drop_table("judgement")
    op.drop_index("ix_run_finished_at", table_name="run")
    op.drop_index("ix_run_param_key", table_name="run")
    op.drop_column("run", "param_key")  # ALTER TABLE DROP COLUMN: the table's triggers stay
