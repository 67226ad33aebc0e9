"""The journal's trend table, beside app/models.py (which holds every other table and has
no room left under the project's module size): `judgement`, one row per successful run
whose regressions were looked for, and, when it regressed and the owner has a webhook,
the alert to deliver and how its delivery went (app/journal/alerts.py). Every change
here needs a migration in migrations/versions/, as for app/models.py."""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from app.models import Base, Run, utcnow

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
