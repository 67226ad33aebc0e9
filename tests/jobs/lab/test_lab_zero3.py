"""ZeRO-3 by hand beside FSDP2: each unit gathered for forward and again for backward and
freed after (read off its storages, and off the order of its collectives), the bytes
against FSDP2's in the same run, and two broken variants: one that forgets a unit's
reduce-scatter (the gate) and one that never frees (the memory check). And the lesson of
the ZeRO run at the catalogue's defaults: each stage holds less per rank than DDP."""

from __future__ import annotations

import json

import pytest
import torch
from lab_helpers import PLUGINS, TINY, launch, shared

from jobs.lab.components.context import Context
from jobs.lab.components.instrument import Comm, Timeline
from jobs.lab.components.model import ModelConfig
from jobs.lab.predict import cost
from jobs.lab.predict.layout import FLAT, layout
from jobs.lab.strategies.base import TrainSpec
from jobs.lab.strategies.correctness import GATE_STEPS
from jobs.lab.strategies.zero3 import Zero3
from tests.real_runs import PARAMS

ONE_STEP = {**TINY, "world_size": 2, "steps": 1, "warmup": 0}


def _plugin(name: str) -> dict:
    return {"COMMONPLACE_LAB_PLUGIN": str(PLUGINS / name)}


def _bytes(entry: dict, kind: str) -> int:
    return next(r["counted_bytes"] for r in entry["comm"]["bytes_vs_predicted"]
                if r["rank"] == 0 and r["kind"] == kind)


def test_units_are_gathered_twice_freed_and_cost_one_root_gather_more_than_fsdp2(
        tmp_path_factory):
    """On the views' zero run (tests/real_runs.py): world 2, zero3 and fsdp2 beside the
    other ZeRO strategies, three timed steps of which step 0's events are read."""
    run = shared(tmp_path_factory, "zero", PARAMS["zero"])
    assert run.rc == 0, run.stderr[-3000:]
    zero3, fsdp2 = run.strategy("zero3"), run.strategy("fsdp2")
    for entry in (zero3, fsdp2):
        c = entry["correctness"]
        assert c["passed"] and c["steps_checked"] == GATE_STEPS and c["coverage_exact"]
        assert c["max_rel_error"] < 1e-4
        assert entry["comm"]["all_exact"]
    p = run.result["params"]
    h, L, v, s, e, d = p["hidden"], p["layers"], p["vocab"], p["seq_len"], 4, 2
    assert p["world_size"] == d
    P = cost.param_count("gpt", L, h, s, v)
    block = 12 * h * h + 13 * h
    root = P - L * block  # embedding + final norm and head: FSDP2's root unit
    # these sizes split evenly over 2 ranks: no padding on either side
    assert _bytes(zero3, "all_gather") == 2 * P * e  # every unit, forward and backward
    assert _bytes(zero3, "reduce_scatter") == _bytes(fsdp2, "reduce_scatter") == P * e
    assert _bytes(zero3, "all_gather") - _bytes(fsdp2, "all_gather") == root * e
    for m in zero3["memory"]:
        assert m["measured"]["params"] == P * e // d  # a 1/d shard of every unit
        assert 0.9 <= m["peak"]["ratio"] <= 1.1, m["peak"]
    # the units' storages, read at every gather: at most the one computing and the one
    # prefetched are whole (here two blocks); every other unit's storage is empty
    for extra in zero3["extra"]:
        assert extra["units"] == L + 2
        assert extra["gathered_peak_units"] == 2
        assert extra["gathered_peak_bytes"] == 2 * block * e
    events = [json.loads(line) for line in (run.out / "events.jsonl").read_text().splitlines()]
    mine = [ev for ev in events if ev.get("strategy") == "zero3" and ev.get("step") == 0
            and ev["rank"] == 0]
    units = list(range(L + 2))
    assert [ev["unit"] for ev in mine if ev["kind"] == "all_gather"] == units + units[::-1]
    assert [ev["bucket"] for ev in mine if ev["kind"] == "reduce_scatter"] == units[::-1]


def test_at_the_defaults_each_zero_stage_holds_less_per_rank_than_ddp_and_the_stage_before(
        tmp_path):
    """The run a learner starts with the defaults (one timed step here): ZeRO-1 once held
    exactly DDP's model state per rank."""
    run = launch("zero", {"device": "cpu", "steps": 1, "warmup": 0,
                          "strategies": ["ddp", "zero1", "zero2", "zero3"]}, tmp_path)
    assert run.rc == 0, run.stderr[-2000:]
    held = {s["strategy"]: [(m["measured"]["total"], m["peak"]["measured"])
                            for m in s["memory"]] for s in run.result["strategies"]}
    for rank in range(2):
        state = [held[name][rank][0] for name in ("ddp", "zero1", "zero2", "zero3")]
        assert state == sorted(state, reverse=True) and len(set(state)) == 4, held
        peaks = [held[name][rank][1] for name in ("ddp", "zero1", "zero2", "zero3")]
        assert all(peak < peaks[0] for peak in peaks[1:]), held


def test_a_unit_never_reduce_scattered_is_caught_by_the_gate(tmp_path):
    run = launch("zero", {**ONE_STEP, "strategies": ["zero3"]}, tmp_path,
                 env=_plugin("zero3_unscattered.py"))
    assert run.rc == 3, run.stderr[-2000:]
    assert run.result["failed"] == ["zero3"]
    c = run.strategy("zero3")["correctness"]
    assert not c["passed"] and c["steps_checked"] == 1
    assert ":blocks.0." in c["reason"] and "step 1 of 3" in c["reason"]
    assert c["max_grad_rel_error"] > 0.1


def test_a_zero3_that_never_frees_is_caught_by_the_memory_check(tmp_path):
    # wide and shallow enough that the parameters are a large part of the peak
    params = {**ONE_STEP, "hidden": 64, "layers": 4, "batch_size": 4, "strategies": ["zero3"]}
    run = launch("zero", params, tmp_path, env=_plugin("zero3_never_frees.py"))
    assert run.rc == 0, run.stderr[-3000:]
    entry = run.strategy("zero3")
    assert entry["correctness"]["passed"] and entry["comm"]["all_exact"]  # right, and yet
    assert all(x["gathered_peak_units"] == 4 + 2 for x in entry["extra"])
    assert all(m["peak"]["ratio"] > 1.1 for m in entry["memory"])  # the matrix's bound


@pytest.mark.parametrize("kind,world", [("gpt", 2), ("gpt", 3), ("mlp", 4)])
def test_the_sharding_view_is_the_shards_each_rank_keeps(kind, world):
    """Built in process (the constructor communicates nothing): every unit's storage is
    empty, each rank keeps a 1/d shard, and the layout's flat ranges are its slices."""
    dims = {"layers": 2, "hidden": 24, "heads": 4, "seq_len": 8, "vocab": 37}  # padding
    cfg = ModelConfig(kind=kind, **dims)
    lay = layout({"kind": kind, **dims}, "zero3", world)
    pieces = {t.name: t.pieces for b in lay.blocks for t in b.tensors}
    assert all(p.dim == FLAT for ps in pieces.values() for p in ps)
    for rank in range(world):
        timeline = Timeline(rank)
        ctx = Context(rank, world, torch.device("cpu"), "gloo", timeline,
                      Comm(timeline, None, torch.device("cpu")), out_dir="")
        real = Zero3(ctx, TrainSpec(cfg, 4))
        assert [u["padded"] for u in real.buckets] == \
            [-(-u["numel"] // world) * world for u in real.buckets]
        assert all(u["flat"].untyped_storage().nbytes() == 0 for u in real.buckets)
        assert real.model_state()["params"] == sum(u["padded"] for u in real.buckets) // world * 4
        names = {id(p): n for n, p in real.model.named_parameters()}
        mine = {}
        for u in real.buckets:
            for p, off, n in u["layout"]:
                lo, hi = max(off, u["lo"]), min(off + n, u["hi"])
                if lo < hi:
                    mine[names[id(p)]] = (lo - off, hi - off)
        assert {name: (p.start, p.stop) for name, ps in pieces.items() for p in ps
                if p.rank == rank} == mine
    assert sum(lay.owned_elements()) == cfg.param_count()
