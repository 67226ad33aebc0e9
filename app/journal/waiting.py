"""What waits for the scheduler, asked through the standard library's sqlite3.

The scheduler's long-lived clock (clock.py) asks these every few seconds and starts a
child with the ORM (scheduler.py) only when one says yes: at rest, and while runs are
going, none does. Each question is the SQL of a query the journal writes with the ORM,
named beside it; tests/app/journal/test_clock.py holds each pair to the same answers.
Times compare as SQLAlchemy stores them in SQLite: naive UTC text, to the microsecond.
"""

from __future__ import annotations

import datetime as dt
import sqlite3
import threading
from pathlib import Path
from typing import NamedTuple

from base.statuses import ACTIVE, CANCELLED, QUEUED, SKIPPED, SUCCEEDED, TERMINAL

# Only runs that finished this recently are judged (alerts.py: old news is not sent).
JUDGE_WINDOW = dt.timedelta(days=1)
BUSY_TIMEOUT_S = 10.0
# SQLite's page cache for the clock's one connection, in KiB (its default is 2,000): the
# operating system keeps the file's pages for every process, so this only saves a copy.
CACHE_KIB = 256


class ScheduleRow(NamedTuple):
    id: int
    cron: str
    timezone: str
    misfire_grace_s: int
    updated_at: str


def _listed(statuses: tuple[str, ...]) -> str:
    return ", ".join(f"'{status}'" for status in statuses)


class Waiting:
    def __init__(self, path: Path):
        self.path = path.resolve()
        self.lock = threading.Lock()
        self.conn: sqlite3.Connection | None = None

    @classmethod
    def at(cls, database_url: str) -> Waiting:
        """For the database at `database_url`, which must be a SQLite file: the clock holds
        no SQLAlchemy, so it reads no other database."""
        scheme, _, rest = database_url.partition(":///")
        path = rest.split("?", 1)[0]
        if not scheme.startswith("sqlite") or path in ("", ":memory:"):
            raise SystemExit("the scheduler reads its database as a SQLite file: "
                             "COMMONPLACE_DATABASE_URL names another database")
        return cls(Path(path))

    def _ask(self, sql: str, **params) -> list[tuple]:
        with self.lock:  # the clock's jobs ask from threads of their own
            if self.conn is None:
                self.conn = self._connect()
            return self.conn.execute(sql, params).fetchall()

    def _connect(self) -> sqlite3.Connection:
        # One connection, kept: the last connection to a WAL database to close checkpoints
        # and deletes its -wal file, and a web at rest has closed its own, so a connection
        # for each question would write both files anew every few seconds (an SD card's
        # wear). mode=rw never makes a database that is gone; query_only: we only ask.
        conn = sqlite3.connect(f"{self.path.as_uri()}?mode=rw", uri=True, isolation_level=None,
                               timeout=BUSY_TIMEOUT_S, check_same_thread=False)
        conn.execute(f"PRAGMA cache_size = -{CACHE_KIB}")
        conn.execute("PRAGMA query_only = 1")
        return conn

    def schedules(self) -> list[ScheduleRow]:
        """The enabled schedules (the clock's sync)."""
        return [ScheduleRow(*row) for row in self._ask(
            "SELECT id, cron, timezone, misfire_grace_s, updated_at FROM schedule "
            "WHERE enabled ORDER BY id")]

    def reap_due(self, max_queue_age_s: float, now: dt.datetime | None = None) -> bool:
        """A lease ran out, or a run waited in the queue too long (runs.reap,
        runs.expire_queued)."""
        now = now or _utcnow()
        return bool(self._ask(
            f"SELECT 1 FROM run WHERE (status IN ({_listed(ACTIVE)}) AND lease_expires_at < :now)"
            f" OR (status = '{QUEUED}' AND created_at < :queued_before) LIMIT 1",
            now=_stamp(now),
            queued_before=_stamp(now - dt.timedelta(seconds=max_queue_age_s))))

    def cards_due(self) -> bool:
        """A finished run not yet in its letter (posting.POSTABLE)."""
        return bool(self._ask(
            f"SELECT 1 FROM run WHERE status IN ({_listed(TERMINAL)}) "
            "AND carded_entry_id IS NULL "
            f"AND NOT (status IN ('{CANCELLED}', '{SKIPPED}') AND started_at IS NULL) LIMIT 1"))

    def alerts_due(self, webhook: bool, now: dt.datetime | None = None) -> bool:
        """A run to judge (alerts.unjudged) or, with a webhook, an alert to deliver
        (alerts.due)."""
        now = now or _utcnow()
        if self._ask(f"SELECT 1 FROM run WHERE status = '{SUCCEEDED}' AND finished_at >= :since "
                     "AND NOT EXISTS (SELECT 1 FROM judgement WHERE judgement.run_id = run.id) "
                     "LIMIT 1", since=_stamp(now - JUDGE_WINDOW)):
            return True
        return webhook and bool(self._ask(
            "SELECT 1 FROM judgement WHERE next_at IS NOT NULL AND sent_at IS NULL "
            "AND failed_at IS NULL AND next_at <= :now LIMIT 1", now=_stamp(now)))


def _stamp(when: dt.datetime) -> str:
    """A naive UTC time as SQLAlchemy's SQLite DATETIME writes it, so text compares as time."""
    return when.strftime("%Y-%m-%d %H:%M:%S.%f")


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)
