"""Schedules: rows that say "run this experiment with these parameters on this cron".

The table is the source of truth; the scheduler process (scheduler.py) only wakes
up at the right times and calls `fire_due`, which is idempotent: a fire is one run row,
guarded by the unique (schedule_id, scheduled_for) key, so a restarted or duplicated
scheduler can neither lose nor double a fire.
"""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa
from sqlalchemy.orm import Session

from app.config import DEFAULT_SCHEDULED_RUNS_PER_MINUTE
from app.errors import Invalid, NotFound, refuse_unknown
from app.journal import cron_phrases, runs
from app.models import Run, Schedule, utcnow
from base import statuses

MAX_GRACE_S = 7 * 24 * 3600
# A schedule starts a run at most this often: each fire is a run, and a minutely cron would
# queue runs faster than any runner takes them. Many schedules on the same minute are held
# by a cap on all of them together (fire_due's `per_minute`): past it, a fire is a skip.
MIN_INTERVAL = dt.timedelta(minutes=10)
FIRES_CHECKED = 48  # enough consecutive fires to see a cron's closest pair
FIELDS = ("name", "experiment", "params", "cron", "timezone", "enabled", "misfire_grace_s")


def next_fires(cron: str, timezone: str, count: int = 5,
               after: dt.datetime | None = None) -> list[dt.datetime]:
    trig = cron_phrases.trigger(cron, timezone)
    now = after or dt.datetime.now(dt.UTC)
    fires, previous = [], None
    for _ in range(count):
        nxt = trig.get_next_fire_time(previous, now if previous is None else previous)
        if nxt is None:
            break
        if previous is not None and nxt <= previous:
            nxt = trig.get_next_fire_time(previous, previous + dt.timedelta(seconds=1))
        fires.append(nxt)
        previous = nxt
    return fires


def latest_fire(cron: str, timezone: str, now: dt.datetime,
                since: dt.datetime) -> dt.datetime | None:
    """The last fire time in (since, now], or None. Times are aware; callers bound the
    window by the misfire grace (at most a week: ~10k steps for a minutely cron)."""
    trig = cron_phrases.trigger(cron, timezone)
    latest, cursor = None, since
    while True:
        nxt = trig.get_next_fire_time(None, cursor + dt.timedelta(seconds=1))
        if nxt is None or nxt > now:
            break
        latest, cursor = nxt, nxt
    return latest


def _clean(session: Session, data: dict, current: Schedule | None = None) -> dict:
    refuse_unknown(data, FIELDS)
    merged = {
        "name": current.name if current else "", "experiment": current.experiment if current
        else None, "params": current.params if current else {},
        "cron": current.cron if current else None,
        "timezone": current.timezone if current else "UTC",
        "enabled": current.enabled if current else True,
        "misfire_grace_s": current.misfire_grace_s if current else 6 * 3600,
        **data,
    }
    name = merged["name"]
    if not isinstance(name, str) or len(name) > 100:
        raise Invalid("name is text of at most 100 characters", "name")
    if not isinstance(merged["enabled"], bool):
        raise Invalid("enabled is true or false", "enabled")
    grace = merged["misfire_grace_s"]
    if isinstance(grace, bool) or not isinstance(grace, int) or not 0 <= grace <= MAX_GRACE_S:
        raise Invalid(f"misfire_grace_s is whole seconds from 0 to {MAX_GRACE_S}",
                      "misfire_grace_s")
    merged["cron"] = cron_phrases.to_cron(merged["cron"])
    allowed_fires(merged["cron"], merged["timezone"])
    experiment = merged["experiment"]
    merged["params"] = runs.check_params(session, experiment, merged["params"])
    merged["cron"] = " ".join(merged["cron"].split())
    merged["name"] = name.strip() or f"{experiment} ({merged['cron']})"
    return merged


def allowed_fires(cron: str, timezone: str) -> list[dt.datetime]:
    """The next fires of a crontab line, or Invalid if it never fires or fires more often
    than a schedule may: what a save checks, and what the form's preview shows."""
    cron_phrases.check_zone(timezone)
    fires = next_fires(cron, timezone, FIRES_CHECKED)
    if not fires:
        raise Invalid(f"cron {cron!r} never fires", "cron")
    closest = min((b - a for a, b in zip(fires, fires[1:], strict=False)), default=None)
    if closest is not None and closest < MIN_INTERVAL:
        minutes = int(MIN_INTERVAL.total_seconds() // 60)
        raise Invalid(f"cron {cron!r} fires every {_span(closest)}; a schedule may start a "
                      f"run at most every {minutes} minutes", "cron")
    return fires


def _span(delta: dt.timedelta) -> str:
    seconds = int(delta.total_seconds())
    return f"{seconds // 60} minute{'s' if seconds // 60 != 1 else ''}" if seconds >= 60 \
        else f"{seconds} seconds"


def create(session: Session, data: dict) -> Schedule:
    if not isinstance(data, dict):
        raise Invalid("send a JSON object")
    schedule = Schedule(**_clean(session, data), created_at=utcnow(), updated_at=utcnow())
    session.add(schedule)
    session.flush()
    return schedule


def update(session: Session, schedule: Schedule, data: dict) -> Schedule:
    for key, value in _clean(session, data, schedule).items():
        setattr(schedule, key, value)
    schedule.updated_at = utcnow()
    return schedule


def get(session: Session, schedule_id: int) -> Schedule:
    schedule = session.get(Schedule, schedule_id)
    if schedule is None:
        raise NotFound(f"no schedule {schedule_id}")
    return schedule


def fire_due(session: Session, schedule: Schedule, now: dt.datetime | None = None,
             per_minute: int = DEFAULT_SCHEDULED_RUNS_PER_MINUTE) -> Run | None:
    """Fire the schedule's latest due time, if it has not fired yet and is within the
    misfire grace. Missed fires coalesce into this one; older ones are dropped. Once
    `per_minute` runs of any schedules start in the fire's minute, it is a visible skip."""
    now = now or dt.datetime.now(dt.UTC)
    if not schedule.enabled:
        return None
    since = (schedule.last_fired_at or schedule.created_at).replace(tzinfo=dt.UTC)
    # Fires older than the grace window are dropped: too late to be this week's numbers.
    window = max(since, now - dt.timedelta(seconds=schedule.misfire_grace_s))
    due = latest_fire(schedule.cron, schedule.timezone, now, window)
    if due is None:
        if window > since:
            schedule.last_fired_at = window.replace(tzinfo=None)
        return None
    due_utc = due.astimezone(dt.UTC).replace(tzinfo=None)
    schedule.last_fired_at = due_utc
    if session.scalar(sa.select(Run.id).where(Run.schedule_id == schedule.id,
                                              Run.scheduled_for == due_utc)):
        return None  # another scheduler got here first
    unfinished = session.scalar(sa.select(Run.id).where(
        Run.schedule_id == schedule.id, Run.status.in_(statuses.UNFINISHED)).limit(1))
    try:
        with session.begin_nested():
            run = runs.create(session, schedule.experiment, schedule.params,
                              actor="scheduler", trigger="schedule", schedule_id=schedule.id,
                              scheduled_for=due_utc)
            if unfinished:
                runs.skip(session, run, reason=f"run {unfinished} of this schedule is still "
                                               "unfinished")
            elif (started := started_in_minute(session, due_utc, run.id)) >= per_minute:
                runs.skip(session, run, reason_code="too_many_scheduled_runs",
                          reason=f"schedules already started {started} runs this minute, "
                                 f"the most they may (COMMONPLACE_SCHEDULED_RUNS_PER_MINUTE)")
    except sa.exc.IntegrityError:
        return None  # the unique (schedule, fire time) key: someone else enqueued it
    except Invalid as exc:
        # The catalogue changed under a stored schedule: keep a visible record of the fire.
        run = runs.enqueue(session, schedule.experiment, schedule.params, {},
                           actor="scheduler", trigger="schedule", schedule_id=schedule.id,
                           scheduled_for=due_utc)
        runs.transition(session, run, runs.FAILED, actor="scheduler",
                        reason=f"parameters no longer valid: {exc.field}: {exc.message}",
                        reason_code="invalid_params")
    return run


def started_in_minute(session: Session, when: dt.datetime, besides: int) -> int:
    """Runs that schedules started (not skipped) in the minute of `when`, other than one."""
    minute = when.replace(second=0, microsecond=0)
    return session.scalar(sa.select(sa.func.count(Run.id)).where(
        Run.trigger == "schedule", Run.id != besides, Run.status != statuses.SKIPPED,
        Run.scheduled_for >= minute, Run.scheduled_for < minute + dt.timedelta(minutes=1)))
