"""The correctness gate catches what a one-step, name-level, absolute-tolerance gate let
through: a ZeRO-1 that forgets its momentum, a shard with a hole, a 1F1B that runs in
GPipe's order, a ZeRO-2 whose hook did not fire, and in bf16 a loss or gradients off by
the same factor everywhere (per-tensor tolerances at bf16's width let those through),
and work lost between ranks: a TP that skips an all-reduce, a pipeline that drops a
micro-batch, a data-parallel rank that sends zeros. Broken strategies are injected the way
broken_dp.py is (COMMONPLACE_LAB_PLUGIN)."""

from __future__ import annotations

import pytest
import torch
from lab_helpers import PLUGINS, TINY, launch

from jobs.lab.strategies.correctness import FLOOR, GATE_STEPS, TOLERANCES, _coverage, compare


def _plugin(name: str) -> dict:
    return {"COMMONPLACE_LAB_PLUGIN": str(PLUGINS / name)}


def test_zero1_that_drops_its_optimizer_state_and_a_shard_with_a_hole_are_caught(tmp_path):
    run = launch("zero", {**TINY, "world_size": 2, "steps": 1, "warmup": 0,
                          "strategies": ["ddp", "zero1", "zero2"], "bucket_cap_mb": 0.01},
                 tmp_path, env=_plugin("zero1_drops_state.py"))
    assert run.rc == 3, run.stderr[-2000:]
    assert run.result["reason"]["code"] == "correctness"
    assert run.result["failed"] == ["zero1", "zero2"]
    forgetful = run.strategy("zero1")["correctness"]
    # identical after one step (momentum == gradient), caught at the second on the state
    assert not forgetful["passed"] and forgetful["steps_checked"] == 2
    assert forgetful["reason"].startswith("state:") and "step 2 of 3" in forgetful["reason"]
    assert forgetful["max_state_rel_error"] > 0.1
    assert forgetful["max_grad_abs_error"] < 1e-5  # the gradients alone still look right
    holey = run.strategy("zero2")["correctness"]
    assert not holey["passed"] and not holey["coverage_exact"]
    assert not holey["all_params_have_grad"]
    assert holey["reason"].startswith("grad coverage at step 1")
    assert "1 of" in holey["reason"] and "held by no rank" in holey["reason"]
    assert holey["max_grad_rel_error"] < 1e-4  # every value it did hold was right
    ddp = run.strategy("ddp")["correctness"]
    assert ddp["passed"] and ddp["steps_checked"] == GATE_STEPS and ddp["coverage_exact"]


def test_one_f_one_b_in_gpipe_order_is_caught(tmp_path):
    run = launch("pipeline", {**TINY, "world_size": 2, "micro_batches": 4, "layers": 2,
                              "steps": 1, "warmup": 0, "strategies": ["gpipe", "1f1b"]},
                 tmp_path, env=_plugin("gpipe_as_1f1b.py"))
    assert run.rc == 3, run.stderr[-2000:]
    c = run.strategy("1f1b")["correctness"]
    assert not c["passed"] and c["max_rel_error"] < 1e-4  # right numbers, wrong schedule
    assert c["reason"].startswith("schedule at step 1")
    assert "ran F0 F1 F2 F3 B0 B1 B2 B3" in c["reason"]
    assert "its schedule is F0 F1 B0 F2 B1 F3 B2 B3" in c["reason"]
    assert c["schedule"] == {"checked": True, "order_ok": False, "max_in_flight": [4, 4],
                             "bound": [2, 1]}
    assert run.strategy("gpipe")["correctness"]["schedule"]["order_ok"]


def test_zero2_whose_hook_did_not_fire_is_an_error(tmp_path):
    run = launch("zero", {**TINY, "world_size": 2, "steps": 1, "warmup": 0,
                          "strategies": ["zero2"], "bucket_cap_mb": 0.01},
                 tmp_path, env=_plugin("zero2_silent_hook.py"))
    assert run.rc == 4, run.stderr[-2000:]
    assert run.result["reason"]["code"] == "rank_failed"
    assert "ZeRO-2 bucket 0: its reduce-scatter hook did not fire" in \
        run.result["reason"]["message"]


BF16 = {**TINY, "world_size": 2, "steps": 1, "warmup": 0, "precision": "bf16_adamw"}


def test_a_1f1b_whose_loss_is_m_over_m_plus_1_fails_in_bf16_on_the_loss(tmp_path):
    run = launch("pipeline", {**BF16, "micro_batches": 8, "strategies": ["gpipe", "1f1b"]},
                 tmp_path, env=_plugin("scaled_by_a_little.py"))
    assert run.rc == 3, run.stderr[-2000:]
    assert run.result["failed"] == ["1f1b"]
    c = run.strategy("1f1b")["correctness"]
    assert c["tolerance"] == "bf16_compute" and c["steps_checked"] == 1
    # every tensor within bf16's per-tensor tolerance, the loss 1/9 low
    assert c["max_rel_error"] < 0.3
    assert c["reason"].startswith("loss differs from the single-device reference at step 1")
    assert c["loss"] / c["reference_loss"] == pytest.approx(8 / 9, rel=1e-3)
    assert c["grad_norm_ratios"][0] == pytest.approx(8 / 9, rel=5e-3)
    right = run.strategy("gpipe")["correctness"]
    assert right["passed"] and right["steps_checked"] == GATE_STEPS
    assert max(right["loss_rel_errors"]) < right["loss_rtol"] / 10
    assert all(abs(r - 1) < right["norm_rtol"] / 4 for r in right["grad_norm_ratios"])


def test_gradients_one_percent_low_fail_in_bf16_on_the_gradient_norm(tmp_path):
    run = launch("data_parallel", {**BF16, "strategies": ["dp_naive", "dp_bucket"]},
                 tmp_path, env=_plugin("scaled_by_a_little.py"))
    assert run.rc == 3, run.stderr[-2000:]
    assert run.result["failed"] == ["dp_bucket"]
    c = run.strategy("dp_bucket")["correctness"]
    assert c["max_rel_error"] < TOLERANCES["bf16_compute"].rtol  # no tensor looks wrong
    assert c["loss_rel_errors"] == [pytest.approx(0, abs=1e-4)]  # nor does the loss
    assert c["reason"].startswith("global gradient norm differs from the single-device "
                                  "reference at step 1 of 3: 0.990")
    assert run.strategy("dp_naive")["correctness"]["passed"]


@pytest.mark.parametrize("experiment,params,broken", [
    ("tensor_parallel", {"strategies": ["tp_megatron", "tp_dtensor"]}, "tp_megatron"),
    ("pipeline", {"micro_batches": 4, "strategies": ["gpipe", "1f1b"]}, "gpipe"),
    ("data_parallel", {"strategies": ["dp_naive", "dp_bucket"]}, "dp_naive"),
], ids=["tp_skips_an_all_reduce", "pipeline_drops_a_micro_batch", "dp_rank_sends_zeros"])
def test_work_lost_between_ranks_fails_the_gate_on_the_numbers(tmp_path, experiment, params,
                                                                broken):
    run = launch(experiment, {**TINY, "world_size": 2, "steps": 1, "warmup": 0, **params},
                 tmp_path, env=_plugin("lost_work.py"))
    assert run.rc == 3, run.stderr[-2000:]
    assert run.result["reason"]["code"] == "correctness"
    assert run.result["failed"] == [broken]
    c = run.strategy(broken)["correctness"]
    # caught at the first step on a gradient, not by a crash, a schedule or a shape
    assert not c["passed"] and c["steps_checked"] == 1
    assert c["reason"].startswith("grad:")
    assert "differs from the single-device reference at step 1" in c["reason"]
    assert c["max_grad_rel_error"] > 0.05 and c["coverage_exact"]
    assert all(s["correctness"]["passed"] for s in run.result["strategies"]
               if s["strategy"] != broken)


def test_tolerances_are_per_tensor_relative_and_absolute():
    fp32 = TOLERANCES["float32"]
    small = torch.full((4,), 3e-4)  # a small gradient, 3% off: the old atol 1e-5 passed it
    assert not compare("g", small * 1.03, small, fp32)["ok"]
    assert compare("g", small * (1 + 1e-6), small, fp32)["ok"]
    big = torch.tensor([1.0, 1e-9])  # near-zero elements are judged at the tensor's scale
    assert compare("g", big + torch.tensor([0.0, 1e-6]), big, fp32)["ok"]
    report = compare("g", big * 1.5, big, fp32)
    assert not report["ok"] and report["max_rel_error"] == pytest.approx(0.5)
    # a tensor zero in exact arithmetic holds rounding noise: scale floored, not 0
    noise = torch.tensor([3e-10, -2e-10])
    assert compare("k.bias", noise, -noise, fp32, floor=FLOOR * 0.1)["ok"]
    assert not compare("k.bias", noise, -noise, fp32)["ok"]
    assert not compare("g", torch.zeros(3), torch.zeros(2), fp32)["ok"]


def test_coverage_wants_every_element_held_equally_often():
    ref = {"a": torch.zeros(2, 3), "b": torch.zeros(4)}
    offsets = {"a": 0, "b": 6}
    once_or_replicated = torch.tensor([1] * 6 + [2] * 4, dtype=torch.uint8)
    assert _coverage(once_or_replicated, ref, offsets) == []
    hole = torch.tensor([1, 1, 0, 1, 1, 1] + [1] * 4, dtype=torch.uint8)
    assert _coverage(hole, ref, offsets) == ["a: 1 of 6 elements held by no rank"]
    overlap = torch.tensor([1] * 6 + [1, 2, 1, 1], dtype=torch.uint8)
    assert _coverage(overlap, ref, offsets) == ["b: elements held unevenly (1 to 2 copies)"]
