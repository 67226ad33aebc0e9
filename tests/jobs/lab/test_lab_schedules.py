"""Interleaved 1F1B by hand beside PyTorch's ScheduleInterleaved1F1B and
ScheduleInterleavedZeroBubble: the order is torch's (checked against torch's own
schedule generator), every rank's messages match and cannot deadlock under nccl's rules
(simulated), the gate checks the (kind, micro-batch, chunk) order from the events and
catches a variant that runs the chunks in GPipe's order, bytes are exact and memory
within 10%. The bubble is asserted as the formula, not as CPU timing."""

from __future__ import annotations

import pytest
from lab_helpers import PLUGINS, TINY, launch

from jobs.lab.catalogue import registry
from jobs.lab.catalogue.registry import ParamError
from jobs.lab.predict import cost, schedule

NAMES = {"F": "forward", "B": "backward"}
CASES = [(p, m, v) for p in (2, 3, 4) for v in (1, 2, 3) for m in (p, 2 * p, 3 * p)]


def _torch_order(p: int, m: int, v: int, rank: int) -> list[tuple[str, int, int]]:
    """torch's own generator, without stages or a process group."""
    # Imported here: torch costs every xdist worker, which imports every test module to
    # collect it.
    from torch.distributed.pipelining.schedules import ScheduleInterleaved1F1B

    sched = ScheduleInterleaved1F1B.__new__(ScheduleInterleaved1F1B)
    sched.pp_group_size, sched.n_local_stages, sched._n_microbatches = p, v, m
    sched.microbatches_per_round = m // max(1, m // p)
    return [(NAMES[a.computation_type.value], a.microbatch_index, a.stage_index // p)
            for a in sched._calculate_single_rank_operations(rank) if a is not None]


@pytest.mark.parametrize("p,m,v", CASES)
def test_the_order_is_torchs_and_its_messages_meet_without_deadlock(p, m, v):
    for rank in range(p):
        assert schedule.order(p, m, v, rank) == _torch_order(p, m, v, rank)
    assert schedule.check_plan(p, m, v) is None


def test_the_plan_check_catches_a_deadlock_and_the_in_flight_bound_is_the_warm_up():
    # messages posted one op at a time (the next op's receive with this op's send)
    # deadlock under nccl once m > p: both neighbours send a gradient the other has not
    # yet posted the receive for; Megatron's steps (F+B, then one batch) do not
    one_at_a_time = schedule.steps
    try:
        schedule.steps = lambda p, m, v, r: [[op] for op in
                                                   schedule.order(p, m, v, r)]
        assert schedule.check_plan(2, 4, 2).startswith("deadlock")
    finally:
        schedule.steps = one_at_a_time
    for p, m, v in CASES:
        for r in range(p):
            w = schedule.warmup(p, m, v, r)
            bound = w + 1 if w < v * m else v * m
            assert schedule.in_flight(schedule.order(p, m, v, r)) == bound


def test_bubble_formulas_and_message_counts():
    for p, m, _ in CASES:
        assert schedule.interleaved_bubble(p, m, 1) == cost.bubble_fraction(p, m)
        assert schedule.interleaved_bubble(p, m, 2) < cost.bubble_fraction(p, m)
        assert schedule.zero_bubble_claim(p, m, 2) < schedule.interleaved_bubble(
            p, m, 2)
    assert schedule.interleaved_bubble(4, 8, 2) == pytest.approx(3 / 19)
    for p, m, v in CASES:
        for r in range(p):
            c = schedule.messages(p, m, v, r)
            one_f_one_b = cost.pp_comm(r, p, m, 1)["send"]["count"]
            # a middle rank sends v times 1F1B's; an end rank also wraps round (p-1 -> 0)
            assert c["send"] == c["recv"] == (v * one_f_one_b if 0 < r < p - 1
                                              else (2 * v - 1) * m)


def test_registry_rules():
    base = {"world_size": 4, "micro_batches": 4, "batch_size": 8,
            "strategies": ["interleaved_1f1b"]}
    with pytest.raises(ParamError, match="layer per virtual stage"):
        registry.validate("pipeline", {**base, "layers": 4})
    with pytest.raises(ParamError, match="multiple"):
        registry.validate("pipeline", {**base, "layers": 8, "micro_batches": 2,
                                       "batch_size": 8, "world_size": 4,
                                       "strategies": ["torch_zero_bubble"]})
    assert registry.validate("pipeline", {**base, "layers": 8})["virtual_stages"] == 2


def test_interleaved_by_hand_and_torchs_pass_the_gate_with_exact_bytes(tmp_path):
    names = ["interleaved_1f1b", "torch_interleaved_1f1b", "torch_zero_bubble"]
    run = launch("pipeline", {**TINY, "world_size": 2, "layers": 4, "micro_batches": 4,
                              "steps": 1, "warmup": 0, "strategies": names}, tmp_path)
    assert run.rc == 0, run.stderr[-2000:]
    for name in names:
        s = run.strategy(name)
        assert s["correctness"]["passed"], s["correctness"]["reason"]
        assert all(b["exact"] for b in s["comm"]["bytes_vs_predicted"])
        assert s["correctness"]["schedule"]["order_ok"]  # torch's too, from its events
    hand = run.strategy("interleaved_1f1b")
    assert hand["correctness"]["schedule"] == {"checked": True, "order_ok": True,
                                               "max_in_flight": [5, 3], "bound": [5, 3]}
    assert hand["bubble"]["predicted"] == pytest.approx(1 / 9)  # (p-1)/(v*m+p-1)
    for name in names[:2]:
        for m in run.strategy(name)["memory"]:
            assert 0.9 <= m["peak"]["ratio"] <= 1.1, (name, m["rank"], m["peak"])
    assert run.strategy("torch_interleaved_1f1b")["correctness"]["schedule"]["bound"] == [5, 3]
    theirs = run.strategy("torch_interleaved_1f1b")["extra"]
    assert all(e["matches_hand_order"] for e in theirs)  # torch's own order = ours
    zb = run.strategy("torch_zero_bubble")["extra"]
    assert all(" W" in e["torch_order"] for e in zb)  # weight gradients split off
    assert zb[0]["bubble_claim"] == pytest.approx(1 / 25)
    assert run.strategy("torch_zero_bubble")["bubble"]["predicted"] == pytest.approx(1 / 25)
    # its second autograd pass: each rank's backward operators' overhead once more
    zbs = run.strategy("torch_zero_bubble")
    pred, ranks = zbs["prediction"], zbs["compute_per_rank"]
    worst = pred["critical_rank"]
    assert pred["terms_s"]["split_backward"] == pytest.approx(
        ranks[worst]["phases"]["backward"]["op_overhead"])
    assert pred["terms_s"]["split_backward"] > 0
    assert "split_backward" not in run.strategy("torch_interleaved_1f1b")["prediction"]["terms_s"]


def test_interleaved_in_gpipes_order_is_caught_by_the_gate(tmp_path):
    run = launch("pipeline", {**TINY, "world_size": 2, "layers": 4, "micro_batches": 2,
                              "steps": 1, "warmup": 0, "strategies": ["interleaved_1f1b"]},
                 tmp_path,
                 env={"COMMONPLACE_LAB_PLUGIN": str(PLUGINS / "interleaved_all_forward.py")})
    assert run.rc == 3, run.stderr[-2000:]
    c = run.strategy("interleaved_1f1b")["correctness"]
    assert not c["passed"] and c["max_rel_error"] < 1e-4  # right numbers, wrong schedule
    assert c["reason"].startswith("schedule at step 1")
    assert "ran F0.0 F1.0 F0.1 F1.1 B0.1 B1.1 B0.0 B1.0" in c["reason"]
    assert "its schedule is F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 B0.0 B1.0" in c["reason"]
    assert c["schedule"]["max_in_flight"] == [4, 4] and c["schedule"]["bound"] == [4, 3]
