"""Sequence and context parallelism, beyond the matrix: Megatron-SP sends the bytes TP
sends (an all-reduce is a reduce-scatter plus an all-gather) and saves less per rank;
ring attention's sends are c-1 K,V blocks a layer each way; a ring with the wrong
diagonal mask, or one that never turns, is caught by the gate."""

from __future__ import annotations

import pytest
from lab_helpers import NCCL_LIKE, PLUGINS, TINY, launch, shared

from jobs.lab.catalogue import registry
from jobs.lab.predict import cost

QUICK = {**TINY, "steps": 1, "warmup": 0}


def _bytes(strategy: dict, kind: str) -> int:
    rows = [b for b in strategy["comm"]["bytes_vs_predicted"] if b["rank"] == 0
            and b["kind"] == kind]
    return rows[0]["counted_bytes"] if rows else 0


def test_sequence_parallel_sends_tps_bytes_and_saves_less(tmp_path):
    run = launch("sequence", {**QUICK, "world_size": 2,
                              "strategies": ["tp_megatron", "tp_sequence"]}, tmp_path)
    assert run.rc == 0, run.stderr[-2000:]
    tp, sp = run.strategy("tp_megatron"), run.strategy("tp_sequence")
    for s in (tp, sp):
        assert s["correctness"]["passed"] and s["comm"]["all_exact"]
    t, L = 2, TINY["layers"]
    act = TINY["batch_size"] * TINY["seq_len"] * TINY["hidden"] * 4
    gathered, scattered = _bytes(sp, "all_gather"), _bytes(sp, "reduce_scatter")
    # per layer: TP's 4 all-reduces = SP's 4 all-gathers + 4 reduce-scatters, on the wire
    assert _bytes(tp, "all_reduce") == 4 * L * act == scattered == gathered - 2 * act
    wire = cost.busbw_factor
    assert _bytes(tp, "all_reduce") * wire("all_reduce", t) == pytest.approx(
        (gathered - 2 * act + scattered) * wire("all_gather", t))
    # the only all-reduce left: the LayerNorms' and row biases' gradients, 6h a layer
    assert _bytes(sp, "all_reduce") == 6 * TINY["hidden"] * L * 4
    for a, b in zip(tp["memory"], sp["memory"], strict=True):
        assert b["saved_activation_peak_bytes"] < a["saved_activation_peak_bytes"]
        assert b["peak"]["predicted"] < a["peak"]["predicted"]  # measured: gloo-noisy


def test_ring_attention_at_four_ranks_passes_c_minus_1_blocks_each_way(tmp_path_factory):
    """test_lab_matrix's sequence-4 run: cp_ring beside the other strategies, each counted
    and checked on its own, under the matrix's nccl-like process group."""
    run = shared(tmp_path_factory, "sequence", {**QUICK, "world_size": 4}, env=NCCL_LIKE)
    assert run.rc == 0, run.stderr[-2000:]
    cp = run.strategy("cp_ring")
    assert cp["correctness"]["passed"] and cp["correctness"]["max_rel_error"] < 1e-4
    assert cp["comm"]["all_exact"]
    c, L = 4, TINY["layers"]
    block = 2 * TINY["batch_size"] * (TINY["seq_len"] // c) * TINY["hidden"] * 4
    assert _bytes(cp, "send") == _bytes(cp, "recv") == 2 * (c - 1) * L * block


@pytest.mark.parametrize("how", ["mask", "rotation"])
def test_a_broken_ring_is_caught_by_the_gate(tmp_path, how):
    env = {"COMMONPLACE_LAB_PLUGIN": str(PLUGINS / "broken_ring.py"),
           "COMMONPLACE_TEST_BROKEN_RING": how}
    run = launch("sequence", {**QUICK, "world_size": 2, "strategies": ["cp_ring"]},
                 tmp_path, env=env)
    assert run.rc == 3, run.stderr[-2000:]
    assert run.result["reason"]["code"] == "correctness"
    verdict = run.strategy("cp_ring")["correctness"]
    assert not verdict["passed"] and verdict["steps_checked"] == 1
    assert "differs from the single-device reference" in verdict["reason"]


def test_the_rules_ask_for_whole_heads_and_two_chunks_a_rank():
    ok = registry.validate("sequence", {"world_size": 4, "heads": 4, "seq_len": 16})
    assert ok["strategies"] == ["tp_megatron", "tp_sequence", "torch_tp_sequence", "cp_ring"]
    with pytest.raises(registry.ParamError) as bad:
        registry.validate("sequence", {"world_size": 4, "seq_len": 12,
                                       "strategies": ["cp_ring"]})
    assert bad.value.param == "seq_len"
    with pytest.raises(registry.ParamError) as bad:
        registry.validate("sequence", {"world_size": 4, "heads": 2, "hidden": 32,
                                       "strategies": ["tp_sequence"]})
    assert bad.value.param == "heads"
