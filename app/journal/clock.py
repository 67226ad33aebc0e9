"""The scheduler process: a clock that lives for days and holds little; the work in a child.

    python -m app.scheduler     (app/scheduler.py; `commonplace scheduler` and `up` start it)

APScheduler 3 (BlockingScheduler, memory job store) keeps the time; our tables are the
truth. The clock reads them through the standard library's sqlite3 (waiting.py), never
through the ORM, which would be most of its memory. When a job finds something to do, a
child does it, `python -m app.scheduler JOB` (scheduler.py's work), with the ORM, and
exits; the job waits for it, so a job never overlaps itself (max_instances=1).

  sync      every SYNC_S: one cron job per enabled schedule row, re-made when the row
            changes (the web edits rows, never this process's memory)
  fire      a schedule's cron time came: child `fire ID` (schedules.fire_due, idempotent)
  reap      every REAPER_INTERVAL_S, unless the web is down (reaping.py): child `reap`
            when a lease ran out or a run waited too long, or after an outage
  cards     every CARDS_S: child `cards` when a finished run is not in its letter
  alerts    every ALERTS_S: child `alerts` when a run waits to be judged or an alert is due
  letter    Monday 00:00 (our time zone): child `letter`
  backup    nightly: child `backup`

It starts with child `start` (leases' amnesty, this week's letter, the fires missed while it
was down). SIGTERM or SIGINT stops the clock and the children it is waiting for.
"""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import threading

from apscheduler.schedulers.blocking import BlockingScheduler

from app.errors import Invalid
from app.journal import reaping
from app.journal.cron_phrases import trigger
from app.journal.waiting import Waiting

log = logging.getLogger("commonplace.scheduler")
SYNC_S = 3
CARDS_S = 2
ALERTS_S = 5
WORK = [sys.executable, "-m", "app.scheduler"]  # with a job: app/scheduler.py


class Clock:
    def __init__(self, config: dict, waiting: Waiting):
        self.config = config
        self.waiting = waiting
        self.clock = BlockingScheduler(timezone=config["TIMEZONE"], job_defaults={
            # A weekly job missed by seconds during a restart must still run: the grace is
            # hours (APScheduler's default of 1 s would drop it), and fires coalesce.
            "misfire_grace_time": 6 * 3600, "coalesce": True, "max_instances": 1})
        self.known: dict[int, str] = {}  # schedule id → the version its cron job was made from
        self.web = reaping.WebWatch(config["BIND"])
        # Reentrant: a stop (a signal handler) may come while the main thread holds it.
        self.lock = threading.RLock()
        self.children: set[subprocess.Popen] = set()
        self.stopping = False

    def work(self, job: str, *args: str) -> int | None:
        """Do `job` in a child and wait for it: its exit status, or None once stopping.
        A child that fails has written its traceback to our stderr; the job raises, as it
        did when the work ran here, and APScheduler logs it."""
        with self.lock:
            if self.stopping:
                return None
            child = subprocess.Popen([*WORK, job, *args])
            self.children.add(child)
        try:
            status = child.wait()
        finally:
            with self.lock:
                self.children.discard(child)
        if self.stopping:
            return None
        if status not in (0, reaping.LOCKED):
            raise ChildProcessError(f"the scheduler's {job} job exited with status {status}")
        return status

    # -- jobs -----------------------------------------------------------------------------

    def sync(self) -> None:
        rows = self.waiting.schedules()
        wanted = {row.id: f"{row.cron}|{row.timezone}|{row.updated_at}" for row in rows}
        for schedule_id in set(self.known) - set(wanted):
            self.clock.remove_job(f"schedule-{schedule_id}")
            del self.known[schedule_id]
            log.info("schedule %s: no more fires (disabled or deleted)", schedule_id)
        for row in rows:
            if self.known.get(row.id) == wanted[row.id]:
                continue
            try:
                trig = trigger(row.cron, row.timezone)
            except Invalid as exc:
                log.error("schedule %s has a bad cron %r: %s", row.id, row.cron, exc)
                continue
            self.clock.add_job(self.fire, trig, args=[row.id], id=f"schedule-{row.id}",
                               replace_existing=True,
                               misfire_grace_time=max(1, row.misfire_grace_s))
            self.known[row.id] = wanted[row.id]
            log.info("schedule %s: %s (%s)", row.id, row.cron, row.timezone)

    def fire(self, schedule_id: int) -> None:
        self.work("fire", str(schedule_id))

    def reap(self) -> None:
        self.web.reap(self._reap)

    def _reap(self, amnesty: bool) -> bool:
        if not amnesty and not self.waiting.reap_due(self.config["MAX_QUEUE_AGE_S"]):
            return True
        return self.work("reap", *(["--amnesty"] if amnesty else [])) != reaping.LOCKED

    def cards(self) -> None:
        if self.waiting.cards_due():
            self.work("cards")

    def alerts(self) -> None:
        if self.waiting.alerts_due(webhook=bool(self.config.get("WEBHOOK_URL"))):
            self.work("alerts")

    def letter(self) -> None:
        self.work("letter")

    def backup(self) -> None:
        self.work("backup")

    # -- running --------------------------------------------------------------------------

    def start(self) -> None:
        self.web.first_look()
        self.work("start")
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
        log.info("scheduler started (%s schedules, time zone %s)", len(self.known),
                 self.config["TIMEZONE"])
        with self.lock:
            if self.stopping:
                return
        self.clock.start()

    def stop(self, _signum=None, _frame=None) -> None:
        """No new child; those running are told to stop (SQLite rolls back a write a child
        had not committed), and the jobs waiting for them end."""
        with self.lock:
            self.stopping = True
            for child in self.children:
                child.terminate()
        if self.clock.running:
            self.clock.shutdown(wait=False)


def main(config: dict) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s scheduler %(message)s")
    logging.getLogger("apscheduler").setLevel(logging.WARNING)
    logging.getLogger("apscheduler.scheduler").addFilter(quiet_skips)
    clock = Clock(config, Waiting.at(config["DATABASE_URL"]))
    signal.signal(signal.SIGTERM, clock.stop)
    signal.signal(signal.SIGINT, clock.stop)
    clock.start()
    log.info("scheduler stopped")


def quiet_skips(record: logging.LogRecord) -> bool:
    """A job waits for its child, which may take longer than the job's interval: the ticks
    skipped meanwhile (max_instances=1) are the design, not news for the log."""
    return "maximum number of running instances" not in str(record.msg)
