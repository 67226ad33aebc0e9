"""Trends: a finished run's headline numbers against the runs before it that measured the
same thing, judged against their measured spread. Results go in through the path a
runner's do (runs.store_result, then SUCCEEDED), shaped as the lab writes them."""

from __future__ import annotations

import datetime as dt
import re

import pytest

from app.journal import run_metrics, runs, trends
from app.journal.views import card_trend, cards, week_changes
from app.models import Run, Schedule, utcnow
from tests.app.journal.test_cards import HOSTILE
from tests.helpers import THIS_WEEK, schedule_form
from tests.strict_pages import assert_strict_page

SMALL = {"world_size": 2, "device": "cpu", "max_bytes": 1 << 16, "iters": 3}


def collectives_result(busbw: float, spread: float = 0.02, size: int = 1 << 16,
                       **environment) -> dict:
    """A collective sweep's result as the lab writes it: per size the median time with its
    p10/p90, and the bus bandwidth of the median."""
    time_s = size / busbw
    return {"schema_version": 1, "experiment": "collectives", "status": "ok",
            "environment": {"torch": "2.13.0", "host": "a", **environment},
            "fits": {"all_reduce": {"alpha_s": 1e-5, "busbw_Bps": busbw}},
            "table": [{"op": "all_reduce", "bytes": s, "time_s": time_s * s / size,
                       "p10": time_s * s / size * (1 - spread),
                       "p90": time_s * s / size * (1 + spread),
                       "busbw_Bps": busbw} for s in (size // 2, size)]}


def mfu_result(step_s: float, spread: float, memory: float | None = None) -> dict:
    result = {"schema_version": 1, "experiment": "gpt_mfu", "status": "ok",
              "environment": {"torch": "2.13.0"}, "mfu": 0.01 / step_s,
              "step_time_s": {"median": step_s, "p10": step_s * (1 - spread),
                              "p90": step_s * (1 + spread)}}
    if memory is not None:
        result["cuda_max_memory_allocated"] = memory
    return result


def finished(db, experiment: str, params: dict, result: dict, schedule_id=None,
             at: dt.datetime | None = None) -> int:
    """A SUCCEEDED run holding `result`, stored as a runner's report is (a fire of the
    schedule, if one is named, as schedules.fire_due makes it); `at`, when it finished
    (UTC), for a run of a week gone by."""
    with db.write() as session:
        fired = {"schedule_id": schedule_id, "trigger": "schedule",
                 "scheduled_for": dt.datetime(2026, 1, 1) + dt.timedelta(
                     days=session.query(Run).count())} if schedule_id else {}
        run = runs.create(session, experiment, params, actor="test", **fired)
        session.flush()
        runs.transition(session, run, runs.LEASED, actor="runner:test")
        runs.transition(session, run, runs.RUNNING, actor="runner:test")
        runs.store_result(session, run, result)
        runs.transition(session, run, runs.SUCCEEDED, actor="runner:test")
        if at is not None:
            run.finished_at = at
        return run.id


def trend_of(db, run_id: int) -> trends.Trend:
    with db.read() as session:
        found = trends.trend(session, session.get(Run, run_id))
        assert found is not None
        return found


def change(found: trends.Trend, key: str) -> trends.Change:
    return next(c for c in found.changes if c.now.key == key)


def test_a_slower_second_run_is_a_regression_beyond_its_spread(db):
    first = finished(db, "collectives", SMALL, collectives_result(40e9))
    second = finished(db, "collectives", SMALL, collectives_result(33e9))
    found = trend_of(db, second)
    assert found.previous.id == first
    c = change(found, "all_reduce.busbw_Bps@65536")
    assert c.change == pytest.approx(33 / 40 - 1)
    assert c.measured and c.noise == pytest.approx(0.04, rel=0.05)
    assert c.beyond and c.regression
    text = card_trend.lines(found)[-1][0]
    assert text.startswith("all_reduce at 65.5 kB: 33 GB/s, −18% vs ")
    assert f"(#{first}), beyond its ±4% noise" in text


def test_a_change_within_the_measured_spread_is_noise(db):
    finished(db, "collectives", SMALL, collectives_result(40e9, spread=0.1))
    second = finished(db, "collectives", SMALL, collectives_result(37e9, spread=0.1))
    c = change(trend_of(db, second), "all_reduce.busbw_Bps@65536")
    assert not c.beyond and not c.regression
    assert "within its ±20% noise" in card_trend.line_text(c, 1, "Sun")


def test_faster_is_an_improvement_not_a_regression(db):
    finished(db, "gpt_mfu", {"device": "cpu"}, mfu_result(0.2, 0.01))
    second = finished(db, "gpt_mfu", {"device": "cpu"}, mfu_result(0.1, 0.01))
    found = trend_of(db, second)
    assert change(found, "step_time_s").beyond and not found.regressions
    assert change(found, "mfu").change == pytest.approx(1.0)  # MFU doubled: better


def test_a_number_without_a_spread_is_judged_against_the_default_noise(db):
    finished(db, "gpt_mfu", {"device": "cpu"}, mfu_result(0.1, 0.01, memory=1e9))
    second = finished(db, "gpt_mfu", {"device": "cpu"}, mfu_result(0.1, 0.01, memory=1.2e9))
    c = change(trend_of(db, second), "peak_memory_bytes")
    assert not c.measured and c.noise == trends.DEFAULT_NOISE
    assert c.regression  # more memory, beyond the assumed noise
    assert "(no measured spread: assumed)" in card_trend.line_text(c, 1, "Sun")


def test_runs_differing_only_in_sampling_compare_and_others_do_not(db):
    first = finished(db, "collectives", SMALL, collectives_result(40e9))
    more_iters = finished(db, "collectives", {**SMALL, "iters": 7}, collectives_result(40e9))
    assert trend_of(db, more_iters).previous.id == first
    bigger = finished(db, "collectives", {**SMALL, "max_bytes": 1 << 17},
                      collectives_result(40e9))
    assert trend_of(db, bigger).previous is None


def test_the_baseline_is_the_median_of_the_runs_before(db):
    for busbw in (40e9, 30e9, 42e9, 41e9):
        last = finished(db, "collectives", SMALL, collectives_result(busbw))
    c = change(trend_of(db, last), "all_reduce.busbw_Bps@65536")
    assert c.baseline_runs == 3 and c.baseline == pytest.approx(40e9)
    assert "vs the median of 3 runs" in card_trend.line_text(c, 1, "Sun")


def test_a_card_names_the_run_before_and_flags_a_regression(db, client):
    first = finished(db, "collectives", SMALL, collectives_result(40e9))
    second = finished(db, "collectives", SMALL, collectives_result(30e9))
    with db.read() as session:
        html = cards.run_card(session, f"id: {second}")
    assert f'<a href="/runs/{first}">#{first}</a>' in html
    assert 'class="trend-regression"' in html
    assert "2 regressions</strong> beyond noise" in html  # both sizes
    page = client.get(f"/runs/{second}").text
    assert "trend-regression" in page and "/trends/" in page


def test_an_edited_schedule_says_so_instead_of_comparing(db, client):
    schedule_id = int(client.post("/schedules", data=schedule_form(
        experiment="collectives", **{"param.max_bytes": str(1 << 16)})).location.rsplit("/")[-1])
    with db.read() as session:
        params = session.get(Schedule, schedule_id).params
    before = finished(db, "collectives", params, collectives_result(40e9), schedule_id)
    after = finished(db, "collectives", {**params, "max_bytes": 1 << 17},
                     collectives_result(30e9), schedule_id)
    found = trend_of(db, after)
    assert found.previous is None and found.edited_from.id == before
    assert found.edited == ["max_bytes"]
    with db.read() as session:
        html = cards.run_card(session, f"id: {after}")
    assert "Parameters changed since" in html and "trend-regression" not in html
    page = client.get(f"/schedules/{schedule_id}/trend").text
    assert f"max_bytes {1 << 16} → {1 << 17}" in page  # marked where the edit was


def test_the_comparison_key_leaves_out_only_sampling_parameters():
    key = run_metrics.comparison_key
    assert key("collectives", {"iters": 3, "seed": 1}) == key("collectives", {"iters": 9})
    assert key("collectives", {"warmup": 0}) != key("collectives", {"warmup": 2})
    assert key("collectives", {}) != key("gpt_mfu", {})


# -- the trend pages ----------------------------------------------------------------------


def test_the_trend_page_draws_each_run_and_marks_the_environment_change(db, client):
    first = finished(db, "collectives", SMALL, collectives_result(40e9))
    second = finished(db, "collectives", SMALL, collectives_result(30e9, torch="2.14.0"))
    with db.read() as session:
        key = session.get(Run, second).param_key
    response = client.get(f"/trends/{key}")
    assert_strict_page(response)
    page = response.text
    for run_id in (first, second):
        assert f'<a href="/runs/{run_id}" class="trend-point">' in page
    assert "torch 2.13.0 → 2.14.0" in page and 'class="ch-axis trend-env"' in page
    assert "Regression:" in page  # what the latest run's card says
    assert f'href="/trends/{key}"' in client.get(f"/runs/{second}").text


def test_the_trend_page_names_its_parameters_and_its_sampling_apart(db, client):
    """What defines the trend, not the latest run's steps or iterations, which may vary."""
    finished(db, "collectives", SMALL, collectives_result(40e9))
    latest = finished(db, "collectives", {**SMALL, "iters": 7}, collectives_result(40e9))
    bigger = {**SMALL, "max_bytes": 1 << 17}
    steady = [finished(db, "collectives", bigger, collectives_result(40e9)) for _ in "ab"]
    with db.read() as session:
        key, steady_key = (session.get(Run, i).param_key for i in (latest, steady[-1]))
    page = client.get(f"/trends/{key}").text
    params = re.search(r'<p class="meta">Parameters: (.*?)</p>', page)[1]
    assert "max_bytes=65,536" in params and "world_size=2" in params
    assert "iters" not in params
    sampling = re.search(r'<p class="meta trend-sampling">(.*?)</p>', page)[1]
    assert "iters varies (3, 7)" in sampling
    steady_page = client.get(f"/trends/{steady_key}").text
    assert "iters=3 in every run" in steady_page and "varies" not in steady_page


def test_a_schedule_links_its_trend_page_which_draws_its_runs(db, client):
    schedule_id = int(client.post("/schedules", data=schedule_form(
        experiment="collectives", **{"param.max_bytes": str(1 << 16)})).location.rsplit("/")[-1])
    with db.read() as session:
        params = session.get(Schedule, schedule_id).params
    ids = [finished(db, "collectives", params, collectives_result(b), schedule_id)
           for b in (40e9, 41e9)]
    assert f"/schedules/{schedule_id}/trend" in client.get(f"/schedules/{schedule_id}").text
    response = client.get(f"/schedules/{schedule_id}/trend?runs=2")
    assert_strict_page(response)
    for run_id in ids:
        assert f'<a href="/runs/{run_id}" class="trend-point">' in response.text


@pytest.mark.parametrize("path, status", [
    ("/schedules/999/trend", 404), ("/trends/not-a-key", 404), (f"/trends/{'0' * 32}", 404),
    ("/trends/" + "A" * 32, 404), ("/schedules/1/trend?runs=abc", 400),
    ("/schedules/1/trend?runs=1", 400), ("/schedules/1/trend?runs=201", 400),
    ("/schedules/1/trend?runs=%D9%A3", 400),
])
def test_bad_trend_addresses_are_refused(client, path, status):
    client.post("/schedules", data=schedule_form(experiment="collectives"))
    assert client.get(path).status_code == status


def test_migration_0015_keys_the_runs_already_there_and_goes_away_down(tmp_path):
    import json
    import sqlite3

    from alembic import command

    from tests.helpers import at_revision

    params = {"world_size": 2, "iters": 3, "max_bytes": 65536}
    db, migrate = at_revision(tmp_path, "0014")
    with sqlite3.connect(db.sqlite_path) as conn:  # a run as 0014 left it
        conn.execute("INSERT INTO run (id, experiment, params, requires, nodes, status, reason, "
                     "reason_code, trigger, created_by, lease_epoch, created_at, "
                     "progress_step, progress_total, progress, environment, log_size) VALUES "
                     "(1, 'collectives', ?, '{}', 1, 'SUCCEEDED', '', '', 'manual', '', 0, "
                     "'2026-01-01 00:00:00', 0, 0, '{}', '{}', 0)", (json.dumps(params),))
    migrate(command.upgrade, "0015")
    with sqlite3.connect(db.sqlite_path) as conn:
        assert conn.execute("SELECT param_key FROM run").fetchone() == (
            run_metrics.comparison_key("collectives", params),)
        assert conn.execute("SELECT count(*) FROM judgement").fetchone() == (0,)
    migrate(command.downgrade, "0014")
    with sqlite3.connect(db.sqlite_path) as conn:
        columns = [row[1] for row in conn.execute("PRAGMA table_info(run)")]
        assert "param_key" not in columns
        assert not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'judgement'").fetchall()


def training_result(ddp_s: float, memory: float, passed: bool = True) -> dict:
    def strategy(name, step_s, ok=True):
        return {"strategy": name, "label": name.upper(), "correctness": {"passed": ok},
                "step_time_s": {"median": step_s, "p10": step_s * 0.98, "p90": step_s * 1.02},
                "mfu": {"value": 0.001 / step_s},
                "memory": [{"rank": 0, "peak": {"measured": memory}},
                           {"rank": 1, "peak": {"measured": memory / 2}}]}
    return {"schema_version": 1, "experiment": "data_parallel", "status": "ok",
            "environment": {}, "strategies": [strategy("single", 0.01),
                                              strategy("ddp", ddp_s, passed)]}


def test_a_training_run_is_judged_per_strategy_and_a_wrong_answer_is_left_out(db):
    params = {"world_size": 2, "device": "cpu"}
    first = finished(db, "data_parallel", params, training_result(0.020, 1e6))
    second = finished(db, "data_parallel", params, training_result(0.030, 1e6))
    found = trend_of(db, second)
    assert found.previous.id == first
    assert {c.now.key for c in found.regressions} == {"ddp.step_time_s", "ddp.mfu"}
    assert not change(found, "single.step_time_s").beyond
    assert change(found, "ddp.peak_memory_bytes").now.value == 1e6  # the largest rank's
    wrong = finished(db, "data_parallel", params, training_result(0.001, 1e6, passed=False))
    assert "ddp.step_time_s" not in {c.now.key for c in trend_of(db, wrong).changes}


def test_mfu_that_moved_with_its_peak_probe_is_noise_not_a_regression(db):
    """MFU divides by the run's own peak probe (a CPU has no spec sheet). The same step time
    with a luckier probe halves MFU; the probe's own spread says that is noise."""
    params = {"world_size": 2, "device": "cpu"}

    def probed(peak: float, samples: list[float]) -> dict:
        result = training_result(0.020, 1e6)
        for s in result["strategies"]:
            s["mfu"]["value"] *= 1e9 / peak
        result["calibration"] = {"peak_flops": peak, "peak_spread": {
            "n": len(samples), "min": min(samples), "median": sorted(samples)[1],
            "max": max(samples), "kept": "best"}}
        return result

    finished(db, "data_parallel", params, probed(1e9, [0.5e9, 0.8e9, 1e9]))
    found = trend_of(db, finished(db, "data_parallel", params, probed(2e9, [0.9e9, 1.5e9, 2e9])))
    c = change(found, "ddp.mfu")
    assert c.now.value < c.before.value * 0.6  # MFU halved with the probe ...
    assert not c.beyond and not found.regressions  # ... within the probe's spread
    # without a probe's spread recorded, the same drop is a regression
    other = {**params, "warmup": 2}
    finished(db, "data_parallel", other, training_result(0.020, 1e6))
    bare = training_result(0.020, 1e6)
    for s in bare["strategies"]:
        s["mfu"]["value"] /= 2
    assert "ddp.mfu" in {x.now.key for x in trend_of(
        db, finished(db, "data_parallel", other, bare)).regressions}


def test_a_single_timed_step_measured_no_spread(db):
    """`steps=1` (the README's first run) times one step, whose p10 is its p90: that is no
    spread measured, so a change is judged against the assumed noise, not the 1% floor."""
    params = {"world_size": 2, "device": "cpu", "steps": 1}

    def one_step(ddp_s: float) -> dict:
        result = training_result(ddp_s, 1e6)
        for s in result["strategies"]:
            t = s["step_time_s"]
            t.update(n=1, p10=t["median"], p90=t["median"])
        return result

    finished(db, "data_parallel", params, one_step(0.020))
    found = trend_of(db, finished(db, "data_parallel", params, one_step(0.0206)))
    c = change(found, "ddp.step_time_s")  # 3% slower: more than 1%, less than the assumed 5%
    assert not c.measured and c.noise == trends.DEFAULT_NOISE
    assert not c.beyond and not found.regressions
    assert "within its ±5% noise (no measured spread: assumed)" in card_trend.line_text(c, 1, "Sun")


@pytest.mark.parametrize("result", HOSTILE, ids=range(len(HOSTILE)))
def test_trends_read_whatever_a_runner_sent(client, db, result):
    """Two runs holding the cards' hostile results (stored as they are, as the cards'
    test does), compared: the card, the trend page and the week's changes still render."""
    ids = []
    for _ in range(2):
        with db.write() as session:
            run = Run(experiment="data_parallel", params={"world_size": 2}, status="SUCCEEDED",
                      result=result, environment={"device": "cpu"}, finished_at=utcnow(),
                      param_key=run_metrics.comparison_key("data_parallel", {"world_size": 2}))
            session.add(run)
            session.flush()
            ids.append(run.id)
    with db.read() as session:
        html = cards.run_card(session, f"id: {ids[1]}")
        assert "<script" not in html and "<b>" not in html
        assert week_changes.changes_html(session, f"week: {THIS_WEEK}") is not None
        key = session.get(Run, ids[1]).param_key
    assert client.get(f"/trends/{key}").status_code == 200


def test_numbers_too_far_apart_to_divide_are_not_compared(db):
    finished(db, "collectives", SMALL, collectives_result(1e-300))
    second = finished(db, "collectives", SMALL, collectives_result(1e308))
    c = change(trend_of(db, second), "all_reduce.busbw_Bps@65536")
    assert c.change is None and not c.regression
    assert card_trend.line_text(c, 1, "Sun").endswith("not comparable with #1")
