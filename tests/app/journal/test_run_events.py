"""A run's history is complete because one function writes it: every run is born by a
transition to QUEUED, a cancel request is an event, a coalesced schedule fire is a
SKIPPED transition, and a stored schedule whose parameters went stale records its fire as
a QUEUED → FAILED run — never a row without its events."""

import ast
import datetime as dt
from pathlib import Path

import sqlalchemy as sa

from app.journal import runs, schedules
from app.models import RunEvent, Runner, Schedule

ROOT = Path(__file__).resolve().parents[3]
SMALL = {"steps": 1, "warmup": 0}


def history(db, run_id):
    with db.read() as session:
        return [(e.from_status, e.to_status, e.actor, e.reason) for e in session.scalars(
            sa.select(RunEvent).where(RunEvent.run_id == run_id).order_by(RunEvent.id))]


def test_a_new_run_is_born_by_a_transition(db):
    with db.write() as session:
        run = runs.create(session, "data_parallel", SMALL, actor="me@x")
        parent_id = run.id
        child = runs.rerun(session, run, actor="me@x")
    assert history(db, parent_id) == [("", "QUEUED", "me@x", "")]
    assert history(db, child.id) == [("", "QUEUED", "me@x", f"rerun of run {parent_id}")]


def test_a_cancel_request_is_an_event_that_changes_no_state(db):
    with db.write() as session:
        run = runs.create(session, "data_parallel", SMALL, actor="me@x")
        session.add(Runner(name="r1", labels={}))
        session.flush()
        runs.claim(session, session.scalar(sa.select(Runner)), ttl_s=60)
        runs.cancel(session, run, actor="me@x")
        runs.cancel(session, run, actor="me@x")  # asked twice: recorded once
        status = run.status
    assert status == "LEASED"
    assert [(f, t, r) for f, t, _, r in history(db, run.id)][-1] == (
        "LEASED", "LEASED", "cancel requested")
    assert sum(r == "cancel requested" for *_, r in history(db, run.id)) == 1


def test_a_coalesced_fire_is_a_skipped_transition(db):
    with db.write() as session:
        run = runs.create(session, "collectives", {}, actor="scheduler")
        runs.skip(session, run, reason="run 1 of this schedule is still unfinished")
        assert run.finished_at is not None and run.reason_code == "previous_run_unfinished"
    assert [t for _, t, _, _ in history(db, run.id)] == ["QUEUED", "SKIPPED"]


def test_a_stale_schedule_fire_is_recorded_through_transitions(db):
    with db.write() as session:
        schedule = schedules.create(session, {"experiment": "collectives", "cron": "0 * * * *",
                                              "timezone": "UTC"})
        schedule.created_at = dt.datetime(2026, 1, 1, 0, 30)
        # the catalogue changed under the stored row: a parameter it no longer knows
        schedule.params = {**schedule.params, "no_such_param": 1}
        schedule_id = schedule.id
    with db.write() as session:
        run = schedules.fire_due(session, session.get(Schedule, schedule_id),
                                 dt.datetime(2026, 1, 1, 1, 5, tzinfo=dt.UTC))
        assert run.status == "FAILED" and run.reason_code == "invalid_params"
        assert "no_such_param" in run.reason
    assert [(f, t) for f, t, _, _ in history(db, run.id)] == [("", "QUEUED"),
                                                              ("QUEUED", "FAILED")]


def test_no_module_but_runs_writes_a_run_event():
    writers = []
    for path in sorted((ROOT / "app").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "RunEvent":
                writers.append(str(path.relative_to(ROOT)))
    assert set(writers) == {"app/journal/runs.py"}
    assert writers.count("app/journal/runs.py") == 1  # inside transition, nowhere else
