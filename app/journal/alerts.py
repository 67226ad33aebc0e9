"""Regressions told to the owner's webhook (COMMONPLACE_WEBHOOK_URL): a POST with a plain
text body, one line per regression, and a Title header, which is what a self-hosted ntfy
topic takes (and any receiver that reads a body).

The scheduler does both halves: its clock asks every ALERTS_S whether either has work
(app/journal/clock.py), and a child does it (app/journal/scheduler.py):

  judge     successful runs finished lately and not yet judged: each gets a judgement
            row (app/models/journal.py); one with a regression (app/journal/trends.py),
            while a webhook is configured, gets its alert on the row, due now
  deliver   alerts that are due: POSTed, then marked sent; a failure (no answer, or not
            a 2xx) is recorded and retried after a backoff that doubles, up to
            MAX_ATTEMPTS, then marked failed

Why the scheduler and not the web: the run's completion is a runner's request to the web,
which only stores the result; nothing there waits on the owner's webhook. The scheduler
is one clock (the web has several workers, each of which could pick the same alert),
and its jobs never overlap themselves (max_instances=1; each waits for its child, which
ends with it), so an alert is never POSTed twice at once. The rows are the truth: a
restart delivers what was due and repeats nothing marked sent. The one window left is a
crash after the receiver answered and before the mark was written: that alert is sent
again, as any webhook without an idempotency key would.

Only runs that finished within JUDGE_WINDOW are judged (a scheduler down for days, runs
from before trends existed): old news is not sent.
"""

from __future__ import annotations

import datetime as dt
import logging
import urllib.error
import urllib.request
from typing import TYPE_CHECKING

import sqlalchemy as sa
from sqlalchemy.orm import Session

from app.journal import runs
from app.journal.waiting import JUDGE_WINDOW
from app.models import Judgement, Run, utcnow

if TYPE_CHECKING:
    from app.journal import trends

# trends and the card's views are imported where a run is judged, not here: a scheduler
# child that only delivers alerts already judged starts without them.
log = logging.getLogger(__name__)
MAX_ATTEMPTS = 8
BACKOFF_S = 30.0  # before the second try; doubled each time after
MAX_BACKOFF_S = 3600.0
TIMEOUT_S = 10.0
BATCH = 20  # runs judged, or alerts delivered, per tick


def message(trend: trends.Trend, timezone: str) -> tuple[str, str]:
    """The alert's title (ASCII: an HTTP header) and its plain-text body."""
    from app.journal.views import card_trend, cards

    run = trend.run
    # http.client sends headers as Latin-1: keep the title ASCII whatever a name holds
    title = f"Regression in run {run.id} ({run.experiment})".encode("ascii", "replace").decode()
    lines = [text for text, bad in card_trend.lines(trend, timezone, every=True) if bad]
    body = "\n".join([f"Run {run.id} · {cards.title_of(run.experiment)}: "
                      f"{len(lines)} number{'s' if len(lines) > 1 else ''} beyond noise, "
                      "the wrong way.", *lines])
    return title, body


def unjudged(session: Session, now: dt.datetime | None = None) -> list[Run]:
    """Successful runs finished within JUDGE_WINDOW and not judged yet, oldest first."""
    now = now or utcnow()
    return list(session.scalars(
        sa.select(Run).where(Run.status == runs.SUCCEEDED,
                             Run.finished_at >= now - JUDGE_WINDOW,
                             ~sa.exists().where(Judgement.run_id == Run.id))
        .order_by(Run.finished_at, Run.id).limit(BATCH)))


def judge(session: Session, *, webhook: bool, timezone: str = "UTC",
          now: dt.datetime | None = None) -> list[int]:
    """Judge the runs `unjudged` names; returns the ids of those whose alert is now due."""
    from app.journal import trends

    now = now or utcnow()
    alerted = []
    for run in unjudged(session, now):
        trend = trends.trend(session, run)
        regressions = len(trend.regressions) if trend else 0
        row = Judgement(run_id=run.id, judged_at=now, regressions=regressions, title="",
                        body="", attempts=0, last_error="")
        if regressions and webhook:
            row.title, row.body = message(trend, timezone)  # type: ignore[arg-type]
            row.next_at = now
            alerted.append(run.id)
        session.add(row)
    return alerted


def due(session: Session, now: dt.datetime | None = None) -> list[Judgement]:
    return list(session.scalars(
        sa.select(Judgement).where(Judgement.next_at.is_not(None), Judgement.sent_at.is_(None),
                                   Judgement.failed_at.is_(None),
                                   Judgement.next_at <= (now or utcnow()))
        .order_by(Judgement.next_at).limit(BATCH)))


def post(url: str, title: str, body: str) -> str | None:
    """POST one alert; None when the receiver took it (a 2xx), else why not."""
    request = urllib.request.Request(url, data=body.encode(), method="POST", headers={
        "Title": title, "Content-Type": "text/plain; charset=utf-8"})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            return None if 200 <= response.status < 300 else f"HTTP {response.status}"
    except urllib.error.HTTPError as exc:
        return f"HTTP {exc.code}"
    except (OSError, ValueError) as exc:
        return str(exc)[:500] or type(exc).__name__


def record(session: Session, run_id: int, error: str | None,
           now: dt.datetime | None = None) -> None:
    """One delivery attempt's outcome: sent, or the next try after a backoff."""
    now = now or utcnow()
    alert = session.get(Judgement, run_id)
    if alert is None or alert.next_at is None or alert.sent_at is not None:
        return
    alert.attempts += 1
    if error is None:
        alert.sent_at = now
        return
    alert.last_error = error[:500]
    if alert.attempts >= MAX_ATTEMPTS:
        alert.failed_at = now
    else:
        wait = min(MAX_BACKOFF_S, BACKOFF_S * 2 ** (alert.attempts - 1))
        alert.next_at = now + dt.timedelta(seconds=wait)


def deliver_due(db, url: str, now: dt.datetime | None = None) -> list[int]:
    """POST the alerts that are due, each outside any transaction, and record how each
    went; returns the ids of the runs whose alert was sent."""
    with db.read() as session:
        batch = [(a.run_id, a.title, a.body) for a in due(session, now)]
    sent = []
    for run_id, title, body in batch:
        error = post(url, title, body)
        with db.write() as session:
            record(session, run_id, error, now)
        if error is None:
            sent.append(run_id)
        else:
            log.warning("run %s: the webhook did not take its alert: %s", run_id, error)
    return sent
