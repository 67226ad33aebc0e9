"""The scheduler's long-lived clock (app/journal/clock.py): what it asks through sqlite3
(waiting.py) answers as the ORM's queries do, to the microsecond; schedule rows become cron
jobs and edits take effect without a restart; a fire, a reap after an outage and a stop go
through the real child process (`python -m app.scheduler JOB`)."""

import datetime as dt
import http.server
import logging
import os
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from app.config import from_environment
from app.journal import alerts, posting, reaping, runs, schedules
from app.journal.clock import Clock
from app.journal.waiting import JUDGE_WINDOW, Waiting
from app.models import Judgement, Run, Schedule, utcnow
from tests.helpers import ROOT, SMALL, free_port, load, stop_process

NOW = utcnow()
MAX_AGE_S = 24 * 3600.0
US = dt.timedelta(microseconds=1)


def add_run(db, **fields) -> int:
    with db.write() as session:
        run = runs.create(session, "data_parallel", SMALL, actor="t")
        for key, value in fields.items():
            setattr(run, key, value)
        return run.id


def orm_reaps(db) -> bool:
    """What runs.reap and runs.expire_queued would change now, rolled back."""
    session = db.session(write=True)
    try:
        session.begin()
        return bool(runs.reap(session, NOW) + runs.expire_queued(session, MAX_AGE_S, NOW))
    finally:
        session.rollback()
        session.close()


def waiting_of(db) -> Waiting:
    return Waiting(db.sqlite_path)


@pytest.mark.parametrize("fields", [
    {"status": "RUNNING", "lease_expires_at": NOW - US},
    {"status": "RUNNING", "lease_expires_at": NOW},
    {"status": "LEASED", "lease_expires_at": NOW - dt.timedelta(hours=1)},
    {"status": "LEASED", "lease_expires_at": NOW + dt.timedelta(seconds=30)},
    {"status": "SUCCEEDED", "lease_expires_at": NOW - dt.timedelta(hours=1)},
    {"status": "QUEUED", "created_at": NOW - dt.timedelta(seconds=MAX_AGE_S) - US},
    {"status": "QUEUED", "created_at": NOW - dt.timedelta(seconds=MAX_AGE_S)},
    {"status": "QUEUED", "created_at": NOW},
])
def test_a_reap_is_due_exactly_when_the_reaper_would_change_a_run(db, fields):
    add_run(db, **fields)
    assert waiting_of(db).reap_due(MAX_AGE_S, NOW) is orm_reaps(db)


@pytest.mark.parametrize("fields", [
    {"status": "SUCCEEDED"}, {"status": "FAILED"}, {"status": "LOST"}, {"status": "EXPIRED"},
    {"status": "CANCELLED"}, {"status": "CANCELLED", "started_at": NOW},
    {"status": "SKIPPED"}, {"status": "QUEUED"}, {"status": "RUNNING", "started_at": NOW},
    {"status": "FAILED", "carded_entry_id": 1},
])
def test_cards_are_due_exactly_when_a_run_is_postable(db, fields):
    add_run(db, **fields)
    with db.read() as session:
        postable = session.scalar(sa.select(Run.id).where(posting.POSTABLE)) is not None
    assert waiting_of(db).cards_due() is postable


JUDGED = {"judged_at": NOW, "regressions": 1, "title": "", "body": "", "attempts": 0,
          "last_error": ""}


@pytest.mark.parametrize("finished, judgement, webhook", [
    (NOW - dt.timedelta(hours=1), None, False),
    (NOW - JUDGE_WINDOW, None, False),
    (NOW - JUDGE_WINDOW - US, None, False),
    (NOW - dt.timedelta(hours=1), {}, False),
    (NOW - dt.timedelta(hours=1), {"next_at": NOW}, True),
    (NOW - dt.timedelta(hours=1), {"next_at": NOW}, False),
    (NOW - dt.timedelta(hours=1), {"next_at": NOW + US}, True),
    (NOW - dt.timedelta(hours=1), {"next_at": NOW, "sent_at": NOW}, True),
    (NOW - dt.timedelta(hours=1), {"next_at": NOW, "failed_at": NOW}, True),
])
def test_alerts_are_due_exactly_when_a_run_waits_to_be_judged_or_told(db, finished, judgement,
                                                                       webhook):
    run_id = add_run(db, status="SUCCEEDED", finished_at=finished)
    if judgement is not None:
        with db.write() as session:
            session.add(Judgement(run_id=run_id, **JUDGED, **judgement))
    with db.read() as session:
        orm = bool(alerts.unjudged(session, NOW)) or (webhook and bool(alerts.due(session, NOW)))
    assert waiting_of(db).alerts_due(webhook, NOW) is orm


def test_the_judge_window_has_one_owner():
    assert alerts.JUDGE_WINDOW is JUDGE_WINDOW


def test_only_a_sqlite_file_is_read(tmp_path):
    assert Waiting.at(f"sqlite:///{tmp_path}/x.db").path == tmp_path / "x.db"
    for url in ("postgresql://db/notes", "sqlite://", "sqlite:///:memory:"):
        with pytest.raises(SystemExit, match="SQLite file"):
            Waiting.at(url)


def test_a_web_still_starting_is_said_to_be_starting_then_its_first_answer(caplog):
    port = free_port()
    watch = reaping.WebWatch(f"127.0.0.1:{port}")
    with caplog.at_level(logging.INFO, logger="commonplace.scheduler"):
        watch.first_look()  # nothing listens yet: the web of `up` before it answers
        assert "does not answer yet (still starting?)" in caplog.text
        assert "unknown" not in caplog.text and watch.state() == "unknown"

        class Healthy(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200 if self.path == "/healthz" else 404)
                self.end_headers()

            def log_message(self, *args):
                pass

        server = http.server.HTTPServer(("127.0.0.1", port), Healthy)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            assert watch.state() == "up" and watch.state() == "up"
        finally:
            server.shutdown()
            server.server_close()
    assert caplog.text.count(f"the web at http://127.0.0.1:{port}/healthz answers") == 1


@pytest.fixture
def clock(make_app, data_dir, monkeypatch):
    """The clock, not started, over the test's database; its children read the same
    settings from the environment, as under `up`."""
    for key, value in {"COMMONPLACE_DATA_DIR": str(data_dir), "COMMONPLACE_AUTH": "dev",
                       "COMMONPLACE_TIMEZONE": "UTC",
                       "COMMONPLACE_BIND": "unix:/nowhere"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("COMMONPLACE_DATABASE_URL", raising=False)
    app = make_app(BIND="unix:/nowhere")
    config = from_environment()
    return app, Clock(config, Waiting.at(config["DATABASE_URL"]))


def cron_of(clock: Clock, schedule_id: int) -> str | None:
    job = clock.clock.get_job(f"schedule-{schedule_id}")
    return None if job is None else str(job.trigger)


def test_schedule_edits_reach_the_clock_without_a_restart(clock):
    """On a running APScheduler, as the clock's sync job runs (a stopped one only queues
    the jobs it is given)."""
    app, clock = clock
    db = app.extensions["db"]
    with db.write() as session:
        schedule_id = schedules.create(session, {"experiment": "collectives",
                                                 "cron": "0 2 29 2 *"}).id
    running = threading.Thread(target=clock.clock.start)
    running.start()
    try:
        deadline = time.monotonic() + 30
        while not clock.clock.running:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        sync_three_times(db, clock, schedule_id)
    finally:
        clock.clock.shutdown()
        running.join(timeout=30)


def sync_three_times(db, clock: Clock, schedule_id: int) -> None:
    clock.sync()
    assert "hour='2'" in cron_of(clock, schedule_id)
    with db.write() as session:
        schedules.update(session, session.get(Schedule, schedule_id), {"cron": "30 5 1 1 *"})
    clock.sync()
    assert "hour='5'" in cron_of(clock, schedule_id)
    with db.write() as session:
        schedules.update(session, session.get(Schedule, schedule_id), {"enabled": False})
    clock.sync()
    assert cron_of(clock, schedule_id) is None and clock.known == {}


def test_the_log_says_when_a_schedule_stops_firing(clock, caplog):
    # as it says when one starts or changes: someone watching the log sees a disable land
    app, clock = clock
    db = app.extensions["db"]
    with db.write() as session:
        schedule_id = schedules.create(session, {"experiment": "collectives",
                                                 "cron": "0 2 * * *"}).id
    with caplog.at_level(logging.INFO, logger="commonplace.scheduler"):
        clock.sync()
        with db.write() as session:
            schedules.update(session, session.get(Schedule, schedule_id), {"enabled": False})
        clock.sync()
    assert f"schedule {schedule_id}: 0 2 * * * (UTC)" in caplog.text
    assert f"schedule {schedule_id}: no more fires (disabled or deleted)" in caplog.text


def test_a_fire_is_one_run_however_often_the_child_is_asked(clock):
    app, clock = clock
    db = app.extensions["db"]
    past = dt.datetime.now(dt.UTC) - dt.timedelta(hours=2)  # a fire two hours ago, daily
    with db.write() as session:
        schedule = schedules.create(session, {"experiment": "collectives",
                                              "cron": f"{past.minute} {past.hour} * * *"})
        schedule.created_at = (past - dt.timedelta(hours=1)).replace(tzinfo=None)
        schedule_id = schedule.id
    clock.fire(schedule_id)
    clock.fire(schedule_id)  # a restarted clock catching up on the same due time
    with db.read() as session:
        fired = list(session.scalars(sa.select(Run).where(Run.schedule_id == schedule_id)))
    assert [(run.status, run.scheduled_for.minute) for run in fired] == [("QUEUED", past.minute)]


def held_lock(db):
    other = sqlite3.connect(db.sqlite_path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    return other


def test_a_reap_that_meets_a_held_lock_waits_and_then_gives_every_lease_a_ttl(clock):
    app, clock = clock
    db = app.extensions["db"]
    run_id = add_run(db, status="RUNNING", lease_expires_at=utcnow() - dt.timedelta(seconds=1))
    other = held_lock(db)
    try:
        clock.reap()  # the child waits out the busy timeout, then says LOCKED
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert clock.web.down_since is not None and load(db, Run, run_id).status == "RUNNING"
    clock.reap()  # writable again: the child gives every active lease one TTL first
    run = load(db, Run, run_id)
    assert clock.web.down_since is None
    assert run.status == "RUNNING" and run.lease_expires_at > utcnow()


def test_a_stop_ends_the_child_a_job_waits_for(clock):
    app, clock = clock
    other = held_lock(app.extensions["db"])
    statuses = []
    job = threading.Thread(target=lambda: statuses.append(clock.work("reap")))
    try:
        job.start()
        deadline = time.monotonic() + 30
        while not clock.children:  # the child waits for the lock
            assert job.is_alive() and time.monotonic() < deadline
            time.sleep(0.05)
        child = next(iter(clock.children))
        clock.stop()
        job.join(timeout=60)
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert statuses == [None] and child.returncode != reaping.LOCKED and child.returncode < 0
    assert clock.work("cards") is None  # no new child once stopping


CLOCK_WAITING = """
from app.config import from_environment
from app.journal.clock import Clock
from app.journal.waiting import Waiting
config = from_environment()
Clock(config, Waiting.at(config["DATABASE_URL"])).work("reap")
"""


def test_a_child_ends_with_a_clock_that_was_killed(db, data_dir):
    """A clock SIGKILLed while its reap child waits for a held write lock: the child goes
    too, as the work did when it ran inside the scheduler. Had it lived, it would have
    taken the lock once released and reaped the run."""
    run_id = add_run(db, status="RUNNING", lease_expires_at=utcnow() - dt.timedelta(seconds=1))
    other = held_lock(db)
    env = {**os.environ, "COMMONPLACE_DATA_DIR": str(data_dir), "COMMONPLACE_AUTH": "dev",
           "COMMONPLACE_BIND": "unix:/nowhere", "COMMONPLACE_TIMEZONE": "UTC"}
    env.pop("COMMONPLACE_DATABASE_URL", None)
    proc = subprocess.Popen([sys.executable, "-c", CLOCK_WAITING], cwd=ROOT, env=env)
    try:
        deadline = time.monotonic() + 60
        while not (waiting := [pid for pid in children_of(proc.pid) if b"sqlite" in maps(pid)]):
            assert proc.poll() is None and time.monotonic() < deadline  # its imports done
            time.sleep(0.1)
        proc.kill()
        proc.wait(timeout=30)
    finally:
        other.execute("ROLLBACK")
        other.close()
        stop_process(proc)
    deadline = time.monotonic() + 30
    while Path(f"/proc/{waiting[0]}").exists() and not zombie(waiting[0]):
        assert time.monotonic() < deadline, "the child outlived its clock"
        time.sleep(0.1)
    assert load(db, Run, run_id).status == "RUNNING"


def maps(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/maps").read_bytes()
    except OSError:
        return b""


def children_of(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(stat.parent.name))
        except (OSError, ValueError):
            pass
    return found


def zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return False


@pytest.mark.parametrize("argv", [["nope"], ["fire"], ["fire", "x"], ["fire", "1", "2"],
                                  ["reap", "--now"], ["cards", "1"]])
def test_a_child_asked_for_no_job_it_knows_says_how_and_makes_nothing(tmp_path, argv):
    env = {**os.environ, "COMMONPLACE_DATA_DIR": str(tmp_path / "data")}
    env.pop("COMMONPLACE_DATABASE_URL", None)
    out = subprocess.run([sys.executable, "-m", "app.scheduler", *argv], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and "usage: python -m app.scheduler" in out.stderr
    assert not (tmp_path / "data").exists()
