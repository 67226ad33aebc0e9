"""The scheduler process: the only place a scheduler runs (never inside gunicorn).

    python -m app.scheduler     (app/scheduler.py; `commonplace scheduler` and `up` start it)

APScheduler 3 (BlockingScheduler, memory job store) is the clock; our tables are the
truth. Its jobs only write rows:

  sync      every few seconds: one cron job per enabled schedule row, re-made when the
            row changes (the web edits rows, never this process's memory)
  fire      a schedule's cron time came: schedules.fire_due inserts the QUEUED run (or a
            SKIPPED one) under the unique (schedule, fire time) key
  reap      leases that ran out → LOST; runs queued too long → EXPIRED (not while the web
            is down or the database cannot be written: runners renew leases through them,
            so an outage is no runner's fault; nor for a runner the web heard but could
            not store, app/journal/liveness.py)
  cards     finished runs → a card in the Experiments section of their week's letter
  alerts    finished runs judged for regressions; those found POSTed to the owner's
            webhook, once each, retried with backoff (app/journal/alerts.py)
  letter    Monday 00:00 (our time zone): this week's letter
  backup    nightly: an archive of everything (app/backups.py), older ones pruned

On start it catches up: a fire missed while it was down, within the schedule's grace,
runs once (coalesced); and leases get one TTL of amnesty, since no runner could renew
them while the server was down.
"""

from __future__ import annotations

import datetime as dt
import logging
import signal
import urllib.request
from pathlib import Path

import sqlalchemy as sa
from apscheduler.schedulers.blocking import BlockingScheduler

from app.db import OPERATIONAL, locked
from app.errors import Invalid
from app.journal import alerts, gangs, liveness, posting, runs, schedules
from app.models import Entry, Run, RunNode, Schedule, utcnow
from app.notebook.isoweeks import iso_week, today

log = logging.getLogger("commonplace.scheduler")
SYNC_S = 3
CARDS_S = 2
ALERTS_S = 5


class WebWatch:
    """Is the web up? Runners renew their leases through it, so while it is down a lease
    running out says nothing about the runner: the reaper waits, and when the web answers
    again every active lease gets one TTL from then (a runner that kept its job going
    through the outage reports it; one that died is LOST one TTL later).

    The scheduler asks the web's /healthz at COMMONPLACE_BIND. A web it never reached
    (another host, a unix socket) is "unknown" and leases are reaped as they run out."""

    def __init__(self, bind: str, timeout_s: float = 3.0):
        self.url = health_url(bind)
        self.timeout_s = timeout_s
        self.seen_up = False
        self.down_since: dt.datetime | None = None

    def state(self) -> str:
        """"up", "down" (it answered before and does not now) or "unknown"."""
        if self.url is None:
            return "unknown"
        try:
            with urllib.request.urlopen(self.url, timeout=self.timeout_s) as response:
                up = response.status == 200
        except (OSError, ValueError):
            up = False
        if up:
            self.seen_up = True
            return "up"
        return "down" if self.seen_up else "unknown"


def health_url(bind: str) -> str | None:
    if not bind or bind.startswith("unix:") or ":" not in bind:
        return None
    host, _, port = bind.rpartition(":")
    host = host.strip("[]")
    if host in ("", "0.0.0.0"):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    return f"http://{f'[{host}]' if ':' in host else host}:{port}/healthz"


class Scheduler:
    def __init__(self, app):
        self.config = app.config
        self.db = app.extensions["db"]
        self.tz = app.config["TIMEZONE"]
        self.clock = BlockingScheduler(timezone=self.tz, job_defaults={
            # A weekly job missed by seconds during a restart must still run: the grace is
            # hours (APScheduler's default of 1 s would drop it), and fires coalesce.
            "misfire_grace_time": 6 * 3600, "coalesce": True, "max_instances": 1})
        self.known: dict[int, str] = {}  # schedule id → the version its cron job was made from
        self.web = WebWatch(app.config["BIND"])
        self.data_dir = Path(app.config["DATA_DIR"])

    # -- jobs -----------------------------------------------------------------------------

    def sync(self) -> None:
        with self.db.read() as session:
            rows = list(session.scalars(sa.select(Schedule).where(Schedule.enabled)))
        wanted = {row.id: f"{row.cron}|{row.timezone}|{row.updated_at.isoformat()}"
                  for row in rows}
        for schedule_id in set(self.known) - set(wanted):
            self.clock.remove_job(f"schedule-{schedule_id}")
            del self.known[schedule_id]
        for row in rows:
            if self.known.get(row.id) == wanted[row.id]:
                continue
            try:
                trig = schedules.trigger(row.cron, row.timezone)
            except Invalid as exc:
                log.error("schedule %s has a bad cron %r: %s", row.id, row.cron, exc)
                continue
            self.clock.add_job(self.fire, trig, args=[row.id], id=f"schedule-{row.id}",
                               replace_existing=True,
                               misfire_grace_time=max(1, row.misfire_grace_s))
            self.known[row.id] = wanted[row.id]
            log.info("schedule %s: %s (%s)", row.id, row.cron, row.timezone)

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
        """The web is up when it answers and the database takes a write: while either
        fails no runner can renew its lease, so none is reaped, and when both work again
        every active lease gets one TTL from then."""
        if self.web.state() == "down":
            self._outage(f"the web ({self.web.url}) does not answer")
            return
        try:
            if self.web.down_since is not None:
                self.amnesty()
            with self.db.write() as session:
                lost = runs.reap(session, ttl_s=self.config["LEASE_TTL_S"],
                                 heard=lambda run: liveness.last_heard(self.data_dir, run))
                expired = runs.expire_queued(session, self.config["MAX_QUEUE_AGE_S"])
        except OPERATIONAL as exc:
            if not locked(exc):
                raise
            self._outage("the database is locked by another writer")
            return
        if self.web.down_since is not None:
            outage = (utcnow() - self.web.down_since).total_seconds()
            self.web.down_since = None
            log.warning("the web can renew leases again after %.0fs: every active lease got "
                        "one TTL from then", outage)
        for run_id in lost:
            log.warning("run %s is LOST: its lease expired", run_id)
        for run_id in expired:
            log.warning("run %s EXPIRED in the queue", run_id)

    def _outage(self, why: str) -> None:
        if self.web.down_since is None:
            self.web.down_since = utcnow()
            log.warning("%s: leases are not reaped until it works again", why)

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

    # -- running --------------------------------------------------------------------------

    def start(self) -> None:
        log.info("the web at %s is %s", self.web.url or "(not reachable from here)",
                 self.web.state())
        self.amnesty()
        self.letter()
        self.fire()  # catch up on fires missed while we were down (coalesced, within grace)
        self.sync()
        self.clock.add_job(self.sync, "interval", seconds=SYNC_S, id="sync")
        self.clock.add_job(self.reap, "interval", seconds=self.config["REAPER_INTERVAL_S"],
                           id="reap")
        self.clock.add_job(self.cards, "interval", seconds=CARDS_S, id="cards")
        # its own job: a webhook that is slow to answer holds up no card and no reaping
        self.clock.add_job(self.alerts, "interval", seconds=ALERTS_S, id="alerts")
        self.clock.add_job(self.letter, "cron", day_of_week="mon", hour=0, minute=0,
                           id="letter")
        self.clock.add_job(self.backup, "cron", hour=3, minute=30, id="backup")
        log.info("scheduler started (%s schedules, time zone %s)", len(self.known), self.tz)
        self.clock.start()


def main(app) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s scheduler %(message)s")
    logging.getLogger("apscheduler").setLevel(logging.WARNING)
    scheduler = Scheduler(app)
    signal.signal(signal.SIGTERM, lambda _sig, _frame: scheduler.clock.shutdown(wait=False))
    try:
        scheduler.start()
    except KeyboardInterrupt:
        pass
    log.info("scheduler stopped")

