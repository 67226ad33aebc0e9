"""The tables: the notebook's (entry, revision, link, tag, attachment, token, setting,
idempotency_key), then the journal's (runner, schedule, run, run_node, run_param, run_metric,
run_event, metric, run_artifact; judgement is in app/trend_models.py). Every change here needs
a migration in migrations/versions/."""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship, validates


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


def link_key(target: str) -> str:
    """What a [[link]] and an entry's title_key match on: white space collapsed, Unicode-lowered
    ([[über]] reaches "Über"). Stored in entry and link rows: changing it needs a migration."""
    return " ".join(target.split()).lower()


class Base(DeclarativeBase):
    pass


class Entry(Base):
    """A dated markdown note. kind="week" is the weekly letter, one per ISO week."""

    __tablename__ = "entry"
    __table_args__ = (
        # One letter per ISO week; ordinary entries may share a week freely. On PostgreSQL
        # the same partial index comes from the migration (0001): naming a postgresql_*
        # option here would load SQLAlchemy's whole PostgreSQL dialect into every process,
        # a SQLite web worker included (docs/PERFORMANCE.md, *Imports a worker never needs*).
        sa.Index("ix_entry_one_letter_per_week", "iso_week", unique=True,
                 sqlite_where=sa.text("kind = 'week'")),
        sa.Index("ix_entry_date", "date", "id"),
        sa.Index("ix_entry_kind_date", "kind", "date"),
        # the drafts alone (few): published counts are all counts less theirs (0010)
        sa.Index("ix_entry_draft_week", "iso_week", sqlite_where=sa.text("status = 'draft'")),
        # a [[Title]] link's target, newest first (entries.resolve; 0011, 0012)
        sa.Index("ix_entry_title_key", "title_key", "date"),
        # an imported file's entry, found again by its path on the next import (0013)
        sa.Index("ix_entry_source_path", "source_path", unique=True),
        # a [[Folder/Note]] link's candidates: the entries whose file is named Note (0013)
        sa.Index("ix_entry_name_key", "name_key"),
        sa.CheckConstraint("kind IN ('entry', 'week')", name="ck_entry_kind"),
        sa.CheckConstraint("status IN ('draft', 'published')", name="ck_entry_status"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    kind: Mapped[str] = mapped_column(sa.String(8), default="entry")
    date: Mapped[dt.date] = mapped_column(sa.Date)
    iso_week: Mapped[str] = mapped_column(sa.String(8), index=True)  # "2024-W13"
    title: Mapped[str] = mapped_column(sa.String(200))
    # link_key(title), set with the title: what a [[link]] to it is matched on (0012)
    title_key: Mapped[str] = mapped_column(sa.String(200), default="", server_default="")
    slug: Mapped[str] = mapped_column(sa.String(120))
    # the file it was imported from, its path in that folder ("Folder/Note.md"): its identity
    source_path: Mapped[str | None] = mapped_column(sa.String(1000))
    # link_key of that file's name without ".md": what a [[Note]] link matches first
    name_key: Mapped[str | None] = mapped_column(sa.String(200))
    body_md: Mapped[str] = mapped_column(sa.Text, default="")
    # an imported file's front matter keys that no field holds, as YAML; written back in
    # its file (mirror.to_text), shown nowhere else (0017)
    front_matter: Mapped[str | None] = mapped_column(sa.Text)
    body_html: Mapped[str] = mapped_column(sa.Text, default="")
    toc_html: Mapped[str] = mapped_column(sa.Text, default="")
    tags: Mapped[str] = mapped_column(sa.String(1000), default="")  # space-separated, as typed
    # the #tags of its text not in `tags`, set with each render, shown with them (0013)
    body_tags: Mapped[str] = mapped_column(sa.String(1000), default="", server_default="")
    status: Mapped[str] = mapped_column(sa.String(10), default="published")
    # `publish: true`: the entry goes on the public site (app/publishing); off by default
    # (no Python-side default: db.insert_many's rows, e.g. a bulk import's, need not name it)
    publish: Mapped[bool] = mapped_column(server_default=sa.false())
    revision: Mapped[int] = mapped_column(default=0)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(default=utcnow)

    revisions: Mapped[list[Revision]] = relationship(
        back_populates="entry", cascade="all, delete-orphan", passive_deletes=True,
        order_by="Revision.number",
    )

    @validates("title")
    def _keep_title_key(self, _name: str, title: str) -> str:
        self.title_key = link_key(title)
        return title

    @property
    def tag_list(self) -> list[str]:  # the tags field (what a save changes)
        return self.tags.split()

    @property
    def all_tags(self) -> list[str]:  # as pages, the API and the feed show them
        return all_tags(self.tags, self.body_tags)


def all_tags(tags: str, body_tags: str) -> list[str]:
    return list(dict.fromkeys(tags.split() + body_tags.split()))


class Revision(Base):
    """Every save of every entry, full text: history, diff and restore read from here."""

    __tablename__ = "revision"
    __table_args__ = (sa.UniqueConstraint("entry_id", "number"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    entry_id: Mapped[int] = mapped_column(sa.ForeignKey("entry.id", ondelete="CASCADE"))
    number: Mapped[int]
    date: Mapped[dt.date] = mapped_column(sa.Date)
    title: Mapped[str] = mapped_column(sa.String(200))
    body_md: Mapped[str] = mapped_column(sa.Text)
    tags: Mapped[str] = mapped_column(sa.String(1000), default="")
    status: Mapped[str] = mapped_column(sa.String(10))
    publish: Mapped[bool] = mapped_column(server_default=sa.false())
    author: Mapped[str] = mapped_column(sa.String(200))
    note: Mapped[str] = mapped_column(sa.String(200), default="")  # "restored from 3", "import"
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)

    entry: Mapped[Entry] = relationship(back_populates="revisions")


class Link(Base):
    """A [[wiki link]] from one entry to a target key (lower-cased title, ISO week or date).

    Targets are matched by key when backlinks are read, so a link written before its
    target exists starts working the moment the target is created.
    """

    __tablename__ = "link"

    id: Mapped[int] = mapped_column(primary_key=True)
    source_id: Mapped[int] = mapped_column(sa.ForeignKey("entry.id", ondelete="CASCADE"),
                                           index=True)
    target_key: Mapped[str] = mapped_column(sa.String(200), index=True)
    text: Mapped[str] = mapped_column(sa.String(200))
    context: Mapped[str] = mapped_column(sa.String(400), default="")


class EntryAlias(Base):
    """Another name (a link key) an imported note answers [[links]] to: `aliases:`."""

    __tablename__ = "entry_alias"

    entry_id: Mapped[int] = mapped_column(sa.ForeignKey("entry.id", ondelete="CASCADE"),
                                          primary_key=True)
    key: Mapped[str] = mapped_column(sa.String(200), primary_key=True, index=True)


class EntryTag(Base):
    """Tags of an entry: its tag field plus #tags in its body, normalised."""

    __tablename__ = "entry_tag"

    entry_id: Mapped[int] = mapped_column(sa.ForeignKey("entry.id", ondelete="CASCADE"),
                                          primary_key=True)
    tag: Mapped[str] = mapped_column(sa.String(100), primary_key=True, index=True)


class Attachment(Base):
    """An uploaded file, stored content-addressed under <data>/attachments/."""

    __tablename__ = "attachment"
    __table_args__ = (sa.Index("ix_attachment_path", "path", unique=True),)

    id: Mapped[int] = mapped_column(primary_key=True)
    entry_id: Mapped[int | None] = mapped_column(sa.ForeignKey("entry.id", ondelete="SET NULL"),
                                                 index=True)
    sha256: Mapped[str] = mapped_column(sa.String(64), index=True)
    filename: Mapped[str] = mapped_column(sa.String(200))
    # an imported file's path in its folder, and its name lowered: what ![[x.png]] finds
    path: Mapped[str | None] = mapped_column(sa.String(1000))
    name_key: Mapped[str | None] = mapped_column(sa.String(200), index=True)
    content_type: Mapped[str] = mapped_column(sa.String(100))
    size: Mapped[int]
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


class Token(Base):
    """A bearer token for the CLI, feed readers and (later) runners. Only the hash is kept."""

    __tablename__ = "token"
    __table_args__ = (
        sa.CheckConstraint("role IN ('owner', 'viewer', 'runner', 'feed')", name="ck_token_role"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(sa.String(100), unique=True)
    role: Mapped[str] = mapped_column(sa.String(10))
    token_hash: Mapped[str] = mapped_column(sa.String(64), unique=True)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    last_used_at: Mapped[dt.datetime | None]
    revoked_at: Mapped[dt.datetime | None]


class Setting(Base):
    """Small editable settings, e.g. the weekly letter template."""

    __tablename__ = "setting"

    key: Mapped[str] = mapped_column(sa.String(100), primary_key=True)
    value: Mapped[str] = mapped_column(sa.Text)


class IdempotencyKey(Base):
    """A client's Idempotency-Key on POST /api/v1/entries and the entry that request made.
    A retry with the same key (the answer was lost on the way, an offline queue sends
    again) gets that entry back instead of a second copy."""

    __tablename__ = "idempotency_key"

    key: Mapped[str] = mapped_column(sa.String(200), primary_key=True)
    fingerprint: Mapped[str] = mapped_column(sa.String(64))  # sha256 of the request's JSON
    entry_id: Mapped[int | None] = mapped_column(
        sa.ForeignKey("entry.id", ondelete="SET NULL")  # deleted since: a replay says so
    )
    author: Mapped[str] = mapped_column(sa.String(200))
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


# -- the experiment journal ---------------------------------------------------------------


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
