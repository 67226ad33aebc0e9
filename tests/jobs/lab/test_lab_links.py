"""The link probes on a real one-rank gloo group, in process: how a call after compute is
timed and what the sweep keeps (no timing is asserted, only what is timed and kept)."""

from __future__ import annotations

import time

import pytest

from jobs.lab.experiments import links, probes
from jobs.lab.predict import calibration


def test_each_call_after_compute_is_timed_by_itself_after_its_segment(one_rank):
    order: list[str] = []
    fns = [lambda i=i: order.append(f"call {i}") for i in range(3)]
    times = links.after_compute_calls(one_rank, fns, lambda: order.append("compute"))
    # every call comes after compute of its own, and gets a time of its own
    assert order == ["compute", "call 0", "compute", "call 1", "compute", "call 2"]
    assert len(times) == 3 and all(t >= 0 for t in times)


def test_the_sweep_fits_calls_after_compute_beside_the_burst_never_below_it(one_rank):
    sizes = [1024, 4096]
    for op in ("all_reduce", "all_gather"):
        burst, after = links.sweep_link(one_rank, op, sizes, repeats=1, burst=2)
        assert after is not None  # on CPU every collective has its after-compute fit
        assert [S for S, _ in after.samples] == [S for S, _ in burst.samples]
        for (_, t_burst), (_, t_after) in zip(burst.samples, after.samples, strict=True):
            assert t_after >= t_burst > 0


def test_a_segment_of_known_length_computes_at_least_that_much_of_this_threads_time(one_rank):
    # the step's own compute before a call (segment_seconds), counted in CPU time
    segment = links.compute_segment(one_rank, 0.002)
    t0 = time.thread_time()
    segment()
    assert time.thread_time() - t0 >= 0.002
    links.compute_segment(one_rank)()  # none known: the fixed GEMMs


def test_each_link_is_probed_after_the_compute_its_steps_run_before_a_call():
    # a strategy's phases: 4 GEMMs of 1 ms and 100 operators of 10 us = 5 ms of compute;
    # 4 all-reduces on 2-rank groups (3 after a matmul) and 2 sends and receives (the
    # sends after compute): 5 calls after compute, 1 ms of compute before each; the
    # all-reduce is probed after that much (point-to-point is priced back to back)
    phases = {"forward": {"gemm": {"g": 4}, "attention": {}, "ops": 90, "views": 10,
                          "dtensor_ops": 0, "bytes": 0}}
    census = {"phases": phases, "collectives": {
        "all_reduce": {"count_by_size": {2: 4}, "after_compute_by_size": {2: 3}},
        "all_gather": {"count_by_size": {2: 1}, "after_compute_by_size": {2: 0}},
        "send": {"count_by_size": {2: 2}, "after_compute_by_size": {2: 2}},
        "recv": {"count_by_size": {2: 2}, "after_compute_by_size": {2: 0}}}}
    rows = probes.segments_of(census, world=8)
    # the all-gather came back to back
    assert rows == {"all_reduce@2": (phases, 5)}
    cal = calibration.Calibration(flops=1, peak_flops=1, gemm_s={"g": 1e-3}, op_s=1e-5)
    other = (phases, 1)  # another strategy (or rank): 5 ms before its one call
    seconds = probes.segment_seconds(cal, {"all_reduce@2": [rows["all_reduce@2"]] * 2 + [other],
                                           "all_gather@2": [other]})
    assert seconds == pytest.approx({"all_reduce@2": 1e-3, "all_gather@2": 5e-3})  # medians
    assert probes.segments_of({"phases": phases, "collectives": {}}, world=8) == {}
