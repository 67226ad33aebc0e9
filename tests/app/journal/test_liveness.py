"""Liveness that sees the database: a heartbeat that meets a write lock held past the busy
timeout is noted (app/journal/liveness.py) and answered, never a 500, and the reaper
neither reaps while it cannot write nor declares LOST a run whose runner was heard."""

import contextlib
import datetime as dt
import sqlite3

import pytest
import sqlalchemy as sa

from app.journal import liveness, runs
from app.journal.scheduler import Scheduler
from app.models import Run, utcnow
from tests.helpers import SMALL, add_token, bearer, load


@pytest.fixture
def running(make_app):
    """An app whose writers give up on a held lock quickly, and a run RUNNING on a
    runner: (app, runner client, headers, run id, epoch)."""
    app = make_app(DB_BUSY_TIMEOUT_S=0.2, BIND="unix:/nowhere")
    db = app.extensions["db"]
    headers = bearer(add_token(db, "gpu1", "runner"))
    runner = app.test_client()
    assert runner.post("/api/v1/runner/register", json={"labels": {"gpu_count": 0}},
                       headers=headers).status_code == 200
    run_id = app.test_client().post("/api/v1/runs", json={
        "experiment": "data_parallel", "params": SMALL}).get_json()["id"]
    epoch = runner.post("/api/v1/runner/lease", json={"wait": 0},
                        headers=headers).get_json()["run"]["epoch"]
    assert runner.post(f"/api/v1/runner/runs/{run_id}/transition",
                       json={"epoch": epoch, "to": "RUNNING"}, headers=headers).status_code == 200
    return app, runner, headers, run_id, epoch


@contextlib.contextmanager
def write_lock(db):
    """Another writer holding SQLite's write lock (as a long save once did)."""
    other = sqlite3.connect(db.sqlite_path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        yield
    finally:
        other.execute("ROLLBACK")
        other.close()


def expire_stored_lease(db, run_id):
    """The last renewal the database holds ran out: heartbeats failed for a TTL."""
    with db.write() as session:
        session.execute(sa.update(Run).where(Run.id == run_id)
                        .values(lease_expires_at=utcnow() - dt.timedelta(seconds=1)))


def test_a_heartbeat_on_a_locked_database_is_noted_and_the_run_is_not_lost(running):
    app, runner, headers, run_id, epoch = running
    db = app.extensions["db"]
    expire_stored_lease(db, run_id)
    with write_lock(db):
        beat = runner.post(f"/api/v1/runner/runs/{run_id}/heartbeat",
                           json={"epoch": epoch, "step": 5}, headers=headers)
        assert beat.status_code == 200, beat.get_json()
        assert beat.get_json()["noted"] is True and beat.get_json()["cancel"] is False
        stale = runner.post(f"/api/v1/runner/runs/{run_id}/heartbeat",
                            json={"epoch": epoch + 1}, headers=headers)
        assert stale.status_code == 409  # a note is only for the lease's holder
    Scheduler(app).reap()
    run = load(db, Run, run_id)
    assert run.status == "RUNNING" and run.lease_expires_at > utcnow()
    # heard is not alive forever: once a TTL has passed since, the lease runs out
    with db.write() as session:
        assert runs.reap(session, now=dt.datetime(2100, 1, 1), ttl_s=app.config["LEASE_TTL_S"],
                         heard=lambda r: liveness.last_heard(app.config["DATA_DIR"], r)
                         ) == [run_id]


def test_the_reaper_waits_while_the_database_cannot_be_written(running):
    app, _, _, run_id, _ = running
    db = app.extensions["db"]
    scheduler = Scheduler(app)
    expire_stored_lease(db, run_id)
    with write_lock(db):
        scheduler.reap()  # cannot write: no runner could renew either
    assert load(db, Run, run_id).status == "RUNNING"
    scheduler.reap()  # writable again: every active lease gets one TTL from now
    run = load(db, Run, run_id)
    assert run.status == "RUNNING" and run.lease_expires_at > utcnow()


def test_a_run_nobody_heard_is_still_lost(running):
    app, _, _, run_id, _ = running
    db = app.extensions["db"]
    expire_stored_lease(db, run_id)
    Scheduler(app).reap()
    assert load(db, Run, run_id).status == "LOST"
