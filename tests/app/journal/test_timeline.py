"""The run page's measured views from real finished lab runs (CPU, gloo): the per-rank
timeline's idle attribution, the bubble beside what the lab recorded, the ideal
schedule, the traffic heat-map beside the lab's own byte counts, and the page itself
(pickers, bad query values, no inline style or script, nothing for a run without events).

The bubble is the lab's own measure (jobs/lab/experiments/training.py): per rank the
median over the timed steps of 1 − (forward + backward) / step, averaged over the ranks.
Computed again here from events.jsonl it matches result.json's
bubble.measured_idle_fraction to rounding: same events, same definition. (The clock
alignment moves whole ranks, so it changes no rank's own durations.)"""

from __future__ import annotations

import json
import re

import pytest

from app.journal.run_files import artifact_path
from app.journal.views import rank_events, timeline, traffic
from app.journal.views.ideal_schedule import simulate
from base.contract import EVENTS_FILE
from jobs.lab.predict.cost import bubble_fraction, busbw_factor
from tests.real_runs import lab_output, store_run
from tests.strict_pages import assert_strict_page


@pytest.fixture(scope="module")
def pipeline_out(tmp_path_factory):
    return lab_output(tmp_path_factory, "pipeline")


@pytest.fixture(scope="module")
def zero_out(tmp_path_factory):
    return lab_output(tmp_path_factory, "zero")


@pytest.fixture(scope="module")
def dp_out(tmp_path_factory):
    return lab_output(tmp_path_factory, "data_parallel")


def result_of(out) -> dict:
    return json.loads((out / "result.json").read_text())


def test_idle_pieces_and_busy_time_add_up_to_every_rank_step(pipeline_out, zero_out):
    for out in (pipeline_out, zero_out):
        found = rank_events.load(out / EVENTS_FILE)
        for strategy in found.strategies:
            for step in found.timed_steps(strategy):
                view = timeline.step_view(found, strategy, step)
                for lane in view.ranks:
                    idle = sum(p.t1 - p.t0 for p in lane.idle)
                    assert lane.busy_s + idle == pytest.approx(lane.span_s, abs=1e-9)
                    assert sum(lane.idle_by.values()) == pytest.approx(idle, abs=1e-12)
                    for piece in lane.idle:  # inside the step, on no compute
                        assert lane.t0 - 1e-12 <= piece.t0 < piece.t1 <= lane.t1 + 1e-12
                        assert not any(c.t0 < piece.t1 - 1e-12 and piece.t0 + 1e-12 < c.t1
                                       for c in lane.compute)


def test_idle_time_is_attributed_to_what_the_rank_waited_for(pipeline_out):
    found = rank_events.load(pipeline_out / EVENTS_FILE)
    labels = {label for s in ("gpipe", "1f1b") for step in found.timed_steps(s)
              for lane in timeline.step_view(found, s, step).ranks for label in lane.idle_by}
    assert {"warm-up", "waiting on rank 0", "waiting on rank 1"} <= labels
    assert labels <= {"warm-up", "waiting on rank 0", "waiting on rank 1", "other"}


def test_the_measured_bubble_is_what_the_lab_recorded(pipeline_out):
    found = rank_events.load(pipeline_out / EVENTS_FILE)
    checked = 0
    for entry in result_of(pipeline_out)["strategies"]:
        recorded = entry.get("bubble") or {}
        measured, per_rank = timeline.measured_bubble(found, entry["strategy"])
        if recorded.get("measured_idle_fraction") is None:
            assert measured is None  # PyTorch's schedules log no forward/backward spans
            continue
        assert measured == pytest.approx(recorded["measured_idle_fraction"], abs=1e-9)
        assert per_rank == pytest.approx(recorded["per_rank"], abs=1e-9)
        checked += 1
    assert checked == 3  # naive_mp, gpipe, 1f1b


def test_the_ideal_schedule_is_the_formula_at_measured_times(pipeline_out):
    found = rank_events.load(pipeline_out / EVENTS_FILE)
    step = timeline.median_step(found, "gpipe")
    ideal = timeline.step_view(found, "gpipe", step).ideal
    assert (ideal.p, ideal.m, ideal.order) == (2, 4, "gpipe")
    assert ideal.span == pytest.approx((ideal.m + ideal.p - 1) * (ideal.t_f + ideal.t_b))
    assert ideal.formula == pytest.approx(0.2)
    assert timeline.step_view(found, "torch_gpipe", step).ideal is None  # no F/B to scale
    for order in ("gpipe", "1f1b"):
        for p, m in ((2, 4), (4, 8), (4, 2), (1, 3)):
            sim = simulate(order, p, m, 1.0, 2.0)
            assert sim.span == pytest.approx((m + p - 1) * 3.0)
            for stage in range(p):
                busy = sum(s.t1 - s.t0 for s in sim.slots if s.stage == stage)
                assert 1 - busy / sim.span == pytest.approx(bubble_fraction(p, m))
    one_f_one_b = [(s.kind[0], s.mb) for s in simulate("1f1b", 4, 8, 1, 2).slots
                   if s.stage == 1]
    assert one_f_one_b[:4] == [("f", 0), ("f", 1), ("f", 2), ("b", 0)]


def _causal(call) -> bool:
    """A collective ends on every rank after it began on the last rank to join it."""
    return min(e.t1 for e in call) >= max(e.t0 for e in call)


def test_every_collective_of_a_real_ddp_run_ends_after_every_rank_began_it(dp_out):
    raw = rank_events.parse((dp_out / EVENTS_FILE).read_text().splitlines())
    # as the lab wrote them: both ranks on rank 0's clock, no view's correction needed
    assert all(off == 0.0 for off in raw.offsets.values())
    assert result_of(dp_out)["clock"] == {"one_clock": [0, 1], "exchanged": {}}
    calls = rank_events.match_collectives(raw.events)
    assert {c[0].strategy for c in calls} >= {"ddp", "dp_naive", "dp_bucket"}
    assert {c[0].kind for c in calls} == {"all_reduce"}
    late = [(c[0].strategy, c[0].step) for c in calls if not _causal(c)]
    assert late == []


def test_the_view_moves_a_rank_whose_clock_is_off_until_collectives_are_causal(dp_out):
    """A run whose rank 1 took its origin 50 ms late (as one that left a barrier late
    could): the view's offsets put every collective back in order."""
    lines = []
    for line in (dp_out / EVENTS_FILE).read_text().splitlines():
        event = json.loads(line)
        if event["rank"] == 1:
            event["t0"], event["t1"] = event["t0"] - 0.05, event["t1"] - 0.05
        lines.append(json.dumps(event))
    found = rank_events.parse(lines)
    skewed = rank_events.match_collectives([rank_events.parse_line(ln) for ln in lines])
    assert not all(_causal(c) for c in skewed) and found.offsets[1] > 0
    calls = rank_events.match_collectives(found.events)
    assert len(calls) == len(skewed) and all(_causal(c) for c in calls)


def test_the_median_step_is_the_default(pipeline_out):
    found = rank_events.load(pipeline_out / EVENTS_FILE)
    for strategy in found.strategies:
        steps = found.timed_steps(strategy)
        times = sorted(timeline.step_duration(found, strategy, s) for s in steps)
        median = timeline.median_step(found, strategy)
        assert timeline.step_duration(found, strategy, median) == times[(len(times) - 1) // 2]


def test_the_heatmap_moves_the_bytes_the_lab_counted(pipeline_out, zero_out):
    checked = set()
    for out in (pipeline_out, zero_out):
        found = rank_events.load(out / EVENTS_FILE)
        for entry in result_of(out)["strategies"]:
            t = traffic.matrix(found, entry["strategy"])
            comm = entry["comm"]
            if not comm["instrumented"]:
                assert not t.cells  # nothing logged per peer; the page says so
                continue
            n = len(t.ranks)
            for row in comm["per_rank"]:
                counted = sum(v["bytes"] * (1 if kind == "send" else busbw_factor(kind, n))
                              for kind, v in row["per_step"].items() if kind != "recv")
                assert t.sent(row["rank"]) == pytest.approx(counted)
                assert t.cells.get((row["rank"], row["rank"]), 0) == 0
            checked.add(entry["strategy"])
    assert {"gpipe", "1f1b", "ddp", "zero1", "zero2"} <= checked


def test_the_events_file_is_parsed_once_per_version(app, pipeline_out):
    run_id = store_run(app, "pipeline", pipeline_out)
    path = artifact_path(app.config["DATA_DIR"], run_id, EVENTS_FILE)
    first = rank_events.load(path)
    assert rank_events.load(path) is first
    path.write_bytes(path.read_bytes() + b"\n")  # a new upload: a new size
    assert rank_events.load(path) is not first


def test_the_run_page_shows_the_timeline_the_traffic_and_the_trace_link(app, client,
                                                                         pipeline_out):
    run_id = store_run(app, "pipeline", pipeline_out)
    response = client.get(f"/runs/{run_id}")
    assert_strict_page(response)
    page = response.get_data(as_text=True)
    assert 'id="timeline"' in page and 'class="tl-chart"' in page
    assert f"/api/v1/runs/{run_id}/trace.json" in page and "Perfetto" in page
    assert page.count('class="tl-heat"') == 3  # naive_mp, gpipe, 1f1b log their sends
    assert "PyTorch issues this strategy" in page  # torch_gpipe, torch_1f1b
    assert "(p−1)/(m+p−1)" in page
    views = page[page.index('id="timeline"'):page.index('id="traffic"') + 5000]
    assert " style=" not in views and "<script>" not in views
    for size in re.findall(r'font-size="(\d+)"', views):
        assert int(size) >= 12

    found = rank_events.load(artifact_path(app.config["DATA_DIR"], run_id, EVENTS_FILE))
    step = found.timed_steps("1f1b")[-1]
    picked = client.get(f"/runs/{run_id}?tl_strategy=1f1b&tl_step={step}")
    text = picked.get_data(as_text=True)
    assert re.search(r'aria-current="page">1f1b<', text)
    assert f"Step {step} of 1f1b" in text


def test_the_view_opens_on_a_strategy_every_rank_computes_in(app, client, pipeline_out):
    run_id = store_run(app, "pipeline", pipeline_out)
    found = rank_events.load(artifact_path(app.config["DATA_DIR"], run_id, EVENTS_FILE))
    page = client.get(f"/runs/{run_id}").get_data(as_text=True)
    opened = re.search(r'aria-current="page">([a-z0-9_]+)<', page.split('id="timeline"')[1])
    assert opened and opened.group(1) != "single"  # rank 1 idles through the reference
    working = {e.rank for e in found.events
               if e.strategy == opened.group(1) and e.kind in ("forward", "backward")}
    assert working == set(found.ranks()) == {0, 1}


@pytest.mark.parametrize("query", ["tl_strategy=nope", "tl_step=abc", "tl_step=999",
                                   "tl_step=-1", "tl_step=" + "9" * 40,
                                   "tl_strategy=%3Cscript%3E&tl_step=1e9"])
def test_bad_picks_fall_back_and_say_so(app, client, pipeline_out, query):
    run_id = store_run(app, "pipeline", pipeline_out)
    response = client.get(f"/runs/{run_id}?{query}")
    assert response.status_code == 200
    text = response.get_data(as_text=True)
    assert 'class="tl-chart"' in text and "showing" in text
    assert "<script>" not in text.split('id="timeline"')[1].split("</section>")[0]


def test_no_views_for_a_run_without_events(app, client, tmp_path, pipeline_out):
    out = tmp_path / "no-events"
    out.mkdir()
    (out / "result.json").write_bytes((pipeline_out / "result.json").read_bytes())
    run_id = store_run(app, "pipeline", out)
    page = client.get(f"/runs/{run_id}")
    assert page.status_code == 200
    assert b'id="timeline"' not in page.data and b"trace.json" not in page.data
