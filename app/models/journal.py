"""The experiment journal's tables: runner, schedule, run, run_node, run_param, run_metric,
run_event, metric, run_artifact, and judgement (a run's regressions looked for, and the alert
to deliver to the owner's webhook)."""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column, relationship

from app.models.base import Base, utcnow


class Runner(Base):
    """A runner agent on a GPU (or CPU) host. It authenticates with a token of role runner."""

    __tablename__ = "runner"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(sa.String(100), unique=True)
    token_id: Mapped[int | None] = mapped_column(sa.ForeignKey("token.id", ondelete="SET NULL"))
    labels: Mapped[dict] = mapped_column(sa.JSON, default=dict)  # gpu_count, gpu_model, host…
    version: Mapped[str] = mapped_column(sa.String(50), default="")
    experiments: Mapped[list] = mapped_column(sa.JSON, default=list, server_default="[]")
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    last_seen_at: Mapped[dt.datetime | None]


class Schedule(Base):
    """"Every Sunday 02:00, re-run the collective sweep": the scheduler process fires these."""

    __tablename__ = "schedule"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(sa.String(100))
    experiment: Mapped[str] = mapped_column(sa.String(100))
    params: Mapped[dict] = mapped_column(sa.JSON, default=dict)
    cron: Mapped[str] = mapped_column(sa.String(100))
    timezone: Mapped[str] = mapped_column(sa.String(64))
    enabled: Mapped[bool] = mapped_column(default=True)
    misfire_grace_s: Mapped[int] = mapped_column(default=6 * 3600)
    last_fired_at: Mapped[dt.datetime | None]  # UTC, the fire time (not when we noticed)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


class Run(Base):
    """One launch of one experiment with frozen parameters; see app/journal/runs.py for its life."""

    __tablename__ = "run"
    __table_args__ = (
        # A fire of a schedule is one row, whoever inserts it: a second scheduler started
        # by mistake cannot enqueue the same fire twice.
        sa.UniqueConstraint("schedule_id", "scheduled_for", name="uq_run_schedule_fire"),
        sa.Index("ix_run_status", "status", "id"),
        sa.Index("ix_run_created_at", "created_at"),  # the run list's week filter
        sa.Index("ix_run_parent_id", "parent_id"),  # a run's reruns (its page, compare)
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    experiment: Mapped[str] = mapped_column(sa.String(100), index=True)
    params: Mapped[dict] = mapped_column(sa.JSON)  # resolved and frozen at enqueue
    requires: Mapped[dict] = mapped_column(sa.JSON, default=dict)  # e.g. {"gpu_count": 2}
    nodes: Mapped[int] = mapped_column(default=1, server_default="1")  # hosts, leased together
    status: Mapped[str] = mapped_column(sa.String(12))
    reason: Mapped[str] = mapped_column(sa.String(1000), default="")
    reason_code: Mapped[str] = mapped_column(sa.String(40), default="")
    trigger: Mapped[str] = mapped_column(sa.String(12), default="manual")  # manual|schedule|rerun
    created_by: Mapped[str] = mapped_column(sa.String(200), default="")
    parent_id: Mapped[int | None] = mapped_column(sa.ForeignKey("run.id", ondelete="SET NULL"))
    schedule_id: Mapped[int | None] = mapped_column(
        sa.ForeignKey("schedule.id", ondelete="SET NULL"), index=True
    )
    scheduled_for: Mapped[dt.datetime | None]
    runner_id: Mapped[int | None] = mapped_column(sa.ForeignKey("runner.id", ondelete="SET NULL"))
    lease_epoch: Mapped[int] = mapped_column(default=0)
    lease_expires_at: Mapped[dt.datetime | None]
    cancel_requested_at: Mapped[dt.datetime | None]
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    leased_at: Mapped[dt.datetime | None]
    started_at: Mapped[dt.datetime | None]
    finished_at: Mapped[dt.datetime | None]
    progress_step: Mapped[int] = mapped_column(default=0)
    progress_total: Mapped[int] = mapped_column(default=0)
    progress: Mapped[dict] = mapped_column(sa.JSON, default=dict)  # latest key=values
    exit_code: Mapped[int | None]
    environment: Mapped[dict] = mapped_column(sa.JSON, default=dict)
    result: Mapped[dict | None] = mapped_column(sa.JSON)
    log_size: Mapped[int] = mapped_column(default=0)
    carded_entry_id: Mapped[int | None]  # the letter its card was appended to
    param_key: Mapped[str] = mapped_column(sa.String(64), default="", server_default="", index=True)

    runner: Mapped[Runner | None] = relationship()

    @property
    def runner_name(self) -> str | None:
        """(A row of the run list carries the same name, read in its one statement.)"""
        return self.runner.name if self.runner else None


class RunNode(Base):
    """One host of a run that spans hosts (run.nodes > 1): the runner that joined its gang
    lease, its node rank, its own lease and the bytes of its log the server has.
    app/journal/gangs.py keeps these; a one-host run has none."""

    __tablename__ = "run_node"
    __table_args__ = (sa.UniqueConstraint("run_id", "runner_id", name="uq_run_node_runner"),
                      sa.Index("ix_run_node_runner", "runner_id", "status"))

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(sa.ForeignKey("run.id", ondelete="CASCADE"), index=True)
    runner_id: Mapped[int] = mapped_column(sa.ForeignKey("runner.id", ondelete="CASCADE"))
    node_rank: Mapped[int]
    status: Mapped[str] = mapped_column(sa.String(12))  # JOINED LEASED STARTED DONE RELEASED
    address: Mapped[str] = mapped_column(sa.String(100))  # where the runner can be reached
    port: Mapped[int]  # the rendezvous port it offered (used if it is node 0)
    lease_expires_at: Mapped[dt.datetime | None]  # JOINED: the gang's deadline
    joined_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    log_size: Mapped[int] = mapped_column(default=0)  # bytes of this node's log stream

    runner: Mapped[Runner] = relationship()


class RunParam(Base):
    """A run's parameter as an indexed row (a list parameter: one row per element), for
    the run list's ?param.<name>=<value> filters; app/journal/run_metrics.py fills it."""

    __tablename__ = "run_param"
    __table_args__ = (sa.Index("ix_run_param_key_value", "key", "value", "run_id"),)

    run_id: Mapped[int] = mapped_column(sa.ForeignKey("run.id", ondelete="CASCADE"),
                                        primary_key=True)
    key: Mapped[str] = mapped_column(sa.String(100), primary_key=True)
    value: Mapped[str] = mapped_column(sa.String(200), primary_key=True)


class RunMetric(Base):
    """One scalar result of a run (e.g. 1f1b.step_time_s, mfu), for sorting the run list;
    derived from its result by app/journal/run_metrics.py."""

    __tablename__ = "run_metric"
    __table_args__ = (sa.Index("ix_run_metric_key_value", "key", "value", "run_id"),)

    run_id: Mapped[int] = mapped_column(sa.ForeignKey("run.id", ondelete="CASCADE"),
                                        primary_key=True)
    key: Mapped[str] = mapped_column(sa.String(100), primary_key=True)
    value: Mapped[float]


class RunEvent(Base):
    """Every state change of every run: who, when, why."""

    __tablename__ = "run_event"

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(sa.ForeignKey("run.id", ondelete="CASCADE"), index=True)
    at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    from_status: Mapped[str] = mapped_column(sa.String(12), default="")
    to_status: Mapped[str] = mapped_column(sa.String(12))
    actor: Mapped[str] = mapped_column(sa.String(200))
    reason: Mapped[str] = mapped_column(sa.String(1000), default="")


class Metric(Base):
    """A measured value over a run's steps (e.g. tokens/s per step), appended in batches."""

    __tablename__ = "metric"
    __table_args__ = (sa.Index("ix_metric_run_key", "run_id", "key", "step"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(sa.ForeignKey("run.id", ondelete="CASCADE"))
    key: Mapped[str] = mapped_column(sa.String(100))
    step: Mapped[int]
    value: Mapped[float]


class RunArtifact(Base):
    """A file a run produced (events, charts), stored under <data>/runs/<id>/artifacts/."""

    __tablename__ = "run_artifact"
    __table_args__ = (sa.UniqueConstraint("run_id", "name"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(sa.ForeignKey("run.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(sa.String(200))
    content_type: Mapped[str] = mapped_column(sa.String(100))
    size: Mapped[int]
    sha256: Mapped[str] = mapped_column(sa.String(64))
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


# the judge's look at the runs finished lately
sa.Index("ix_run_finished_at", Run.finished_at)


class Judgement(Base):
    __tablename__ = "judgement"
    __table_args__ = (sa.Index("ix_judgement_due", "next_at", sqlite_where=sa.text(
        "next_at IS NOT NULL AND sent_at IS NULL AND failed_at IS NULL")),)

    run_id: Mapped[int] = mapped_column(sa.ForeignKey("run.id", ondelete="CASCADE"),
                                        primary_key=True)
    judged_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    regressions: Mapped[int] = mapped_column(default=0)
    title: Mapped[str] = mapped_column(sa.String(200), default="")  # the alert's, if any
    body: Mapped[str] = mapped_column(sa.Text, default="")
    next_at: Mapped[dt.datetime | None]  # the next delivery try (UTC); None: nothing to send
    attempts: Mapped[int] = mapped_column(default=0)
    sent_at: Mapped[dt.datetime | None]
    failed_at: Mapped[dt.datetime | None]  # given up after alerts.MAX_ATTEMPTS
    last_error: Mapped[str] = mapped_column(sa.String(500), default="")
