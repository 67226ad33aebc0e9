"""The scheduler's work: what its jobs do when the clock (clock.py) finds something to do.

    python -m app.scheduler JOB [ARG]   (app/scheduler.py: the clock's child, which does JOB, exits)

The long-lived scheduler process holds no ORM: when one of its jobs finds work, this runs
in a child, with the ORM, for that job alone, and what it loaded goes when it exits. Its
jobs only write rows:

  start     once, as the clock starts: leases get one TTL of amnesty (no runner could
            renew them while we were down), this week's letter, then the fires missed
            while we were down, within each schedule's grace, once each (coalesced)
  fire ID   a schedule's cron time came: schedules.fire_due inserts the QUEUED run (or a
            SKIPPED one) under the unique (schedule, fire time) key
  reap      leases that ran out → LOST; runs queued too long → EXPIRED (the clock asks
            only while the web answers, reaping.py; `--amnesty` after an outage; exit
            LOCKED when another writer held the database; not for a runner the web heard
            but could not store, app/journal/liveness.py)
  cards     finished runs → a card in the Experiments section of their week's letter
  alerts    finished runs judged for regressions; those found POSTed to the owner's
            webhook, once each, retried with backoff (app/journal/alerts.py)
  letter    Monday 00:00 (our time zone): this week's letter
  backup    nightly: an archive of everything (app/backups.py), older ones pruned
"""

from __future__ import annotations

import datetime as dt
import logging
from pathlib import Path

import sqlalchemy as sa

from app.db import OPERATIONAL, locked
from app.journal import alerts, gangs, liveness, posting, runs, schedules
from app.journal.reaping import LOCKED, WebWatch
from app.models import Entry, Run, RunNode, Schedule, utcnow
from app.notebook.isoweeks import iso_week, today

log = logging.getLogger("commonplace.scheduler")
JOBS = ("start", "fire", "reap", "cards", "alerts", "letter", "backup")
USAGE = f"usage: python -m app.scheduler [{{{'|'.join(JOBS)}}} [SCHEDULE_ID | --amnesty]]"


class Scheduler:
    """The jobs' work on an app or a backend (their settings and database): one job in each
    child of the clock (`run`), and any of them in a test."""

    def __init__(self, app):
        self.config = app.config
        self.db = app.extensions["db"]
        self.tz = app.config["TIMEZONE"]
        self.web = WebWatch(app.config["BIND"])
        self.data_dir = Path(app.config["DATA_DIR"])

    # -- jobs -----------------------------------------------------------------------------

    def fire(self, schedule_id: int | None = None) -> None:
        with self.db.write() as session:
            query = sa.select(Schedule).where(Schedule.enabled)
            if schedule_id is not None:
                query = query.where(Schedule.id == schedule_id)
            for schedule in session.scalars(query):
                run = schedules.fire_due(session, schedule, per_minute=self.config[
                    "SCHEDULED_RUNS_PER_MINUTE"])
                if run is not None:
                    log.info("schedule %s fired: run %s %s", schedule.id, run.id, run.status)

    def reap(self) -> None:
        """Reap, unless the web is down or the database cannot be written (reaping.py)."""
        self.web.reap(self.leases)

    def leases(self, amnesty: bool = False) -> bool:
        """Leases that ran out → LOST, runs queued too long → EXPIRED; with `amnesty`, every
        active lease gets one TTL from now first. False when another writer held the
        database's lock (nothing reaped)."""
        try:
            if amnesty:
                self.amnesty()
            with self.db.write() as session:
                lost = runs.reap(session, ttl_s=self.config["LEASE_TTL_S"],
                                 heard=lambda run: liveness.last_heard(self.data_dir, run))
                expired = runs.expire_queued(session, self.config["MAX_QUEUE_AGE_S"])
        except OPERATIONAL as exc:
            if not locked(exc):
                raise
            return False
        for run_id in lost:
            log.warning("run %s is LOST: its lease expired", run_id)
        for run_id in expired:
            log.warning("run %s EXPIRED in the queue", run_id)
        return True

    def cards(self) -> None:
        for run_id in posting.post_cards(self.db, self.tz):
            log.info("run %s: card added to its letter", run_id)

    def alerts(self, now: dt.datetime | None = None) -> None:
        url = self.config.get("WEBHOOK_URL") or ""
        with self.db.read() as session:
            waiting = bool(alerts.unjudged(session, now))
        found = []
        if waiting:  # the write lock only when there is something to judge
            with self.db.write() as session:
                found = alerts.judge(session, webhook=bool(url), timezone=self.tz, now=now)
        for run_id in found:
            log.warning("run %s regressed: the webhook will be told", run_id)
        if url:
            for run_id in alerts.deliver_due(self.db, url, now):
                log.info("run %s: its regression was delivered to the webhook", run_id)

    def letter(self) -> None:
        """This week's letter, made if missing. Asked first, without the notebook's saving
        and renderer: `up` made it before starting us, so mostly nothing is loaded for it."""
        week = iso_week(today(self.tz))
        with self.db.read() as session:
            if session.scalar(sa.select(Entry.id).where(Entry.kind == "week",
                                                        Entry.iso_week == week)):
                return
        from app.notebook import letters

        if letters.create_letter(self.db, week, posting.AUTHOR):
            log.info("created the letter for %s", week)

    def backup(self) -> None:
        """The nightly archive (app/backups.py: database, attachments, run logs and
        artifacts, with a manifest), older nightly ones pruned."""
        from app import backups  # tarfile and the manifest's code: once a night, not at rest

        if self.db.sqlite_path is None:
            return
        data_dir = Path(self.config["DATA_DIR"])
        path, manifest = backups.create(self.db.sqlite_path, data_dir, data_dir / "backups",
                                        reason="nightly")
        backups.prune(data_dir / "backups", self.config["BACKUP_KEEP_DAYS"])
        log.info("backed up to %s (%s entries, %s runs, %s files)", path,
                 manifest.counts.get("entry"), manifest.counts.get("run"), len(manifest.files))

    def amnesty(self) -> None:
        """Nobody could renew a lease while we were down: give each one TTL from now."""
        until = utcnow() + dt.timedelta(seconds=self.config["LEASE_TTL_S"])
        with self.db.write() as session:
            session.execute(sa.update(Run).where(Run.status.in_(runs.ACTIVE))
                            .values(lease_expires_at=until))
            session.execute(sa.update(RunNode).where(RunNode.status.in_(gangs.HOLDING))
                            .values(lease_expires_at=until))  # each node of a gang run

    def start(self) -> None:
        self.amnesty()
        self.letter()
        self.fire()  # catch up on fires missed while we were down (coalesced, within grace)


def valid(argv: list[str]) -> bool:
    """Whether `argv` names a job as the clock does: `fire ID`, `reap [--amnesty]`, or
    another of JOBS alone."""
    job, *args = argv or [""]
    if job == "fire":
        return len(args) == 1 and args[0].isdecimal()
    if job == "reap":
        return args in ([], ["--amnesty"])
    return job in JOBS and not args


def run(app, job: str, args: list[str]) -> int:
    """Do one job (`valid` arguments); the exit status of the child that does it."""
    scheduler = Scheduler(app)
    if job == "fire":
        scheduler.fire(int(args[0]))
    elif job == "reap":
        return 0 if scheduler.leases(amnesty=bool(args)) else LOCKED
    else:
        getattr(scheduler, job)()
    return 0
