"""Trends from real runs: two fires of one schedule, each a real collective sweep on CPU
(the lab's launcher under torchrun, gloo), stored as the runner stores them; the second's
card in the week's letter names the first and says how each number moved, and the
schedule's trend page draws both. And a run slowed down for real is a regression the
webhook hears of once.

No parameter of the catalogue slows a step while measuring the same thing: one that did
would have to be left out of the comparison key, and the trend would then compare two
different quantities. So the slow run is slowed as the fault drills slow one, by the lab's
test plugin (tests/jobs/lab/plugins/slow_steps.py), its parameters the same."""

from __future__ import annotations

import datetime as dt
import json
import re

from app.journal import alerts, posting, runs, schedules, trends
from app.journal.scheduler import Scheduler
from app.journal.views import cards
from app.models import Run, Schedule, utcnow
from tests.app.journal.test_alerts import Receiver
from tests.helpers import ROOT
from tests.real_runs import PARAMS, SMALL, launch_once, store_run

PLUGINS = ROOT / "tests" / "jobs" / "lab" / "plugins"
SWEEP = {**PARAMS["collectives"], "ops": ["all_reduce"], "measure_overhead": False}


def sweep(tmp_path_factory, sample: int) -> dict:
    """A real sweep; `sample` makes a separate run of the same parameters."""
    out, ran = launch_once(tmp_path_factory, "collectives", SWEEP,
                           env={"COMMONPLACE_TEST_SAMPLE": str(sample)})
    assert ran["rc"] == 0, ran["stdout"][-4000:] + ran["stderr"][-4000:]
    return json.loads((out / "result.json").read_text())


def fire_and_finish(db, schedule_id: int, at: dt.datetime, result: dict) -> int:
    with db.write() as session:
        run = schedules.fire_due(session, session.get(Schedule, schedule_id), at)
        assert run is not None and run.status == runs.QUEUED
        runs.transition(session, run, runs.LEASED, actor="runner:test")
        runs.transition(session, run, runs.RUNNING, actor="runner:test")
        runs.merge_environment(run, result.get("environment") or {})
        runs.store_result(session, run, result)
        runs.transition(session, run, runs.SUCCEEDED, actor="runner:test")
        return run.id


def test_two_fires_of_a_schedule_and_the_second_card_names_the_first(
        tmp_path_factory, client, db):
    results = [sweep(tmp_path_factory, 1), sweep(tmp_path_factory, 2)]
    made = client.post("/api/v1/schedules", json={
        "experiment": "collectives", "cron": "0 2 * * *", "timezone": "UTC",
        "params": results[0]["params"]})
    assert made.status_code == 201, made.get_json()
    schedule_id = made.get_json()["id"]
    with db.write() as session:  # made a while ago, so that two nightly fires are due
        session.get(Schedule, schedule_id).created_at = dt.datetime(2026, 1, 1)
    first = fire_and_finish(db, schedule_id, dt.datetime(2026, 1, 2, 2, 5, tzinfo=dt.UTC),
                            results[0])
    second = fire_and_finish(db, schedule_id, dt.datetime(2026, 1, 3, 2, 5, tzinfo=dt.UTC),
                             results[1])
    posting.post_cards(db, "UTC")

    with db.read() as session:
        run = session.get(Run, second)
        assert run.param_key == session.get(Run, first).param_key
        html = cards.run_card(session, f"id: {second}")
    assert f'Since <a href="/runs/{first}">run {first}</a>' in html
    line = re.compile(rf"all_reduce at [\d.]+ [kMG]?B: [\d.]+ [kMG]?B/s, [+−]\d+% vs "
                      rf"\w{{3}} \d\d \w{{3}} \(<a href=\"/runs/{first}\">#{first}</a>\), "
                      rf"(beyond|within) its ±\d+% noise")
    assert line.search(html), html[html.index("card-trend"):][:2000]
    letter_html = client.get(f"/runs/{second}").text
    assert f"/trends/{run.param_key}" in letter_html

    page = client.get(f"/schedules/{schedule_id}/trend").text
    for run_id in (first, second):
        assert f'<a href="/runs/{run_id}" class="trend-point">' in page


def test_a_run_slowed_down_is_a_regression_and_the_webhook_hears_once(
        tmp_path_factory, make_app):
    """The same parameters twice, the second run's naive data parallel sleeping in every
    step (the lab's test plugin, as the fault drills slow a run): its step time regresses
    far beyond any noise, and the webhook gets one delivery after a failed try."""
    params = {**SMALL, "world_size": 2, "strategies": ["dp_naive"], "steps": 3, "warmup": 1}
    normal, slowed = (launch_once(tmp_path_factory, "data_parallel", params, env=env)
                      for env in ({}, {"COMMONPLACE_LAB_PLUGIN": str(PLUGINS / "slow_steps.py"),
                                       "COMMONPLACE_TEST_STEP_SLEEP": "1"}))
    hook = Receiver([500])
    try:
        app = make_app(WEBHOOK_URL=hook.url)
        db = app.extensions["db"]
        for _, ran in (normal, slowed):
            assert ran["rc"] == 0, ran["stdout"][-4000:] + ran["stderr"][-4000:]
        first, second = (store_run(app, "data_parallel", out) for out, _ in (normal, slowed))
        with db.read() as session:
            found = trends.trend(session, session.get(Run, second))
        assert found.previous.id == first
        assert "dp_naive.step_time_s" in {c.now.key for c in found.regressions}
        now = utcnow()
        Scheduler(app).alerts(now)
        Scheduler(app).alerts(now + dt.timedelta(seconds=alerts.BACKOFF_S))
        Scheduler(app).alerts(now + dt.timedelta(hours=1))
    finally:
        hook.close()
    assert [code for code in hook.answered] == [500, 200]
    title, body = hook.got[-1]
    assert title == f"Regression in run {second} (data_parallel)"
    assert re.search(rf"dp_naive step time: [\d.]+ s, \+\d+% vs .* \(#{first}\), beyond", body)
