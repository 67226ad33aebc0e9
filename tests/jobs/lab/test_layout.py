"""The sharding view's layout (jobs/lab/predict/layout.py, torch-free) against the real thing: the
model's own named parameters, the strategies built in process (no ranks: their
constructors communicate nothing) and the parameter bytes real runs measured."""

from __future__ import annotations

import json

import pytest
import torch

from jobs.lab import strategies
from jobs.lab.components.context import Context
from jobs.lab.components.instrument import Comm, Timeline
from jobs.lab.components.model import ModelConfig, build_model
from jobs.lab.predict import cost
from jobs.lab.predict.layout import FLAT, LABELS, layout, nbytes
from jobs.lab.strategies.base import TrainSpec
from jobs.lab.strategies.data_parallel import DataParallelBucket
from jobs.lab.strategies.pipeline_parallel import Stage
from jobs.lab.strategies.tensor_parallel import MegatronTP
from tests.real_runs import lab_output

CPU = torch.device("cpu")
MODELS = [  # (kind, layers, hidden, heads, seq_len, vocab, tied)
    ("gpt", 3, 32, 4, 16, 50, False), ("gpt", 2, 24, 6, 8, 37, True),
    ("mlp", 5, 16, 2, 8, 32, False)]


def describe(kind, L, h, heads, s, v, tied) -> dict:
    return {"kind": kind, "layers": L, "hidden": h, "heads": heads, "seq_len": s,
            "vocab": v, "tie_head": tied}


def config(kind, L, h, heads, s, v, tied) -> ModelConfig:
    return ModelConfig(kind=kind, layers=L, hidden=h, heads=heads, seq_len=s, vocab=v,
                       tie_head=tied)


def context(rank: int, world: int) -> Context:
    timeline = Timeline(rank)
    return Context(rank, world, CPU, "gloo", timeline, Comm(timeline, None, CPU), out_dir="")


def tensors(lay):
    return [t for b in lay.blocks for t in b.tensors]


def test_every_strategy_is_laid_out_under_its_own_label():
    assert set(LABELS) == set(strategies.STRATEGIES)
    for name, label in LABELS.items():
        assert strategies.get(name).label == label


@pytest.mark.parametrize("dims", MODELS)
def test_names_shapes_and_counts_are_the_models(dims):
    model = build_model(config(*dims))
    lay = layout(describe(*dims), "single", 1)
    assert [(t.name, t.shape) for t in tensors(lay)] == \
        [(n, tuple(p.shape)) for n, p in model.named_parameters()]
    assert sum(t.numel for t in tensors(lay)) == config(*dims).param_count()
    assert [b.label for b in lay.blocks][1:-1] == [f"block {i}" for i in range(dims[1])]


@pytest.mark.parametrize("strategy", ["single", "dp_naive", "dp_bucket", "ddp"])
def test_replicas_hold_the_whole_model(strategy):
    dims = MODELS[0]
    P = config(*dims).param_count()
    lay = layout(describe(*dims), strategy, 3)
    if strategy == "single":
        assert lay.held_bytes() == [4 * P, 0, 0]
        assert all(t.owners == (0,) for t in tensors(lay))
    else:
        assert lay.held_bytes() == [4 * P] * 3
        assert all(t.owners == (0, 1, 2) and t.split == "replicated" for t in tensors(lay))


def test_the_buckets_named_are_the_bucketed_dps():
    dims, cap_mb = MODELS[0], 0.01
    spec = TrainSpec(config(*dims), 6, 1, cap_mb)
    real = DataParallelBucket(context(0, 2), spec)
    lay = layout(describe(*dims), "dp_bucket", 2, bucket_cap_mb=cap_mb)
    names = {id(p): n for n, p in real.model.named_parameters()}
    bucket_of = {names[id(p)]: k for k, b in enumerate(real.buckets) for p in b["params"]}
    for t in tensors(lay):
        assert f"bucket {bucket_of[t.name]} of {len(real.buckets)}" in t.comm[0]


@pytest.mark.parametrize("world", [1, 2, 4])
def test_tensor_parallel_slices_are_megatrons(world):
    dims = ("gpt", 2, 32, 4, 16, 50, False)
    lay = layout(describe(*dims), "tp_megatron", world)
    split, rep = cost.tp_split_params(*dims[1:3], *dims[4:6])
    assert lay.held_elements() == [split // world + rep] * world
    for rank in range(world):
        real = MegatronTP(context(rank, world), TrainSpec(config(*dims), 4))
        shards = {f"{n}.weight": m.shard for n, m in real.model.named_modules()
                  if hasattr(m, "shard")}
        shards |= {f"{n}.bias": (0, *m.shard[1:]) for n, m in real.model.named_modules()
                   if hasattr(m, "shard") and m.shard[0] == 0}
        local = dict(real.model.named_parameters())
        for t in tensors(lay):
            piece = next(p for p in t.pieces if p.rank == rank)
            assert piece.shape == tuple(local[t.name].shape), t.name
            assert t.held[rank] == local[t.name].numel()
            if t.name in shards:
                assert (piece.dim, piece.start, piece.stop) == shards[t.name]
                assert t.split == ("column" if piece.dim == 0 else "row")
            else:
                assert piece.dim is None and t.split == "replicated"


@pytest.mark.parametrize("kind", ["gpt", "mlp"])
@pytest.mark.parametrize("L,p", [(4, 2), (5, 2), (7, 4), (4, 4)])
def test_pipeline_stages_own_what_the_stages_keep(kind, L, p):
    cfg = ModelConfig(kind=kind, layers=L, hidden=16, heads=2, seq_len=8, vocab=32)
    lay = layout(describe(kind, L, 16, 2, 8, 32, False), "gpipe", p, micro_batches=2)
    for rank in range(p):
        kept = {n.removeprefix("model.") for n, _ in Stage(build_model(cfg), rank, p)
                .named_parameters()}
        assert {t.name for t in tensors(lay) if t.owners == (rank,)} == kept
        assert lay.held_elements()[rank] == cost.stage_params(
            kind, L, 16, 8, 32, p, rank)
    assert sum(lay.held_elements()) == cfg.param_count()
    sends = [c for b in lay.blocks for c in b.comm if "sent to rank" in c]
    assert len(sends) == p - 1


@pytest.mark.parametrize("strategy", ["zero1", "zero2"])
@pytest.mark.parametrize("world,cap_mb", [(2, 0.01), (3, 0.004), (4, 1.0)])
def test_zero_ranges_are_the_buckets_slices(strategy, world, cap_mb):
    dims = ("gpt", 2, 24, 4, 8, 37, False)  # odd sizes: the buckets need padding
    spec = TrainSpec(config(*dims), 4, 1, cap_mb)
    lay = layout(describe(*dims), strategy, world, bucket_cap_mb=cap_mb)
    by_name = {t.name: t for t in tensors(lay)}
    P = config(*dims).param_count()
    for rank in range(world):
        real = strategies.get(strategy)(context(rank, world), spec)
        names = {id(p): n for n, p in real.model.named_parameters()}
        mine = {}
        for b in real.buckets:
            for p, off, n in b["layout"]:
                lo, hi = max(off, b["lo"]), min(off + n, b["hi"])
                if lo < hi:
                    mine[names[id(p)]] = (lo - off, hi - off)
        assert {name: (p.start, p.stop) for name, t in by_name.items() for p in t.pieces
                if p.rank == rank} == mine
        assert all(p.dim == FLAT for t in by_name.values() for p in t.pieces)
        assert lay.held_elements()[rank] == P  # ZeRO-1/2 keep every parameter whole
        padded = sum(b["padded"] for b in real.plan)
        assert lay.owned_elements()[rank] <= padded // world
    assert sum(lay.owned_elements()) == P  # the ranges partition the model; padding aside


@pytest.mark.parametrize("world", [2, 3])
def test_fsdp2_shards_are_dim0_chunks(world):
    dims = ("gpt", 2, 24, 4, 8, 37, False)
    model = build_model(config(*dims))
    lay = layout(describe(*dims), "fsdp2", world)
    params = dict(model.named_parameters())
    for t in tensors(lay):
        chunks = torch.chunk(params[t.name].detach(), world, dim=0)  # what fully_shard cuts
        assert [p.shape for p in t.pieces] == [tuple(c.shape) for c in chunks if c.numel()]
        assert list(t.held) == [c.numel() for c in chunks] + [0] * (world - len(chunks))
    assert sum(lay.held_elements()) == config(*dims).param_count()
    block = next(b for b in lay.blocks if b.key == "block")
    unit = nbytes(cost.fsdp_padded([t.shape for t in block.tensors], world) * 4)
    assert all(f"with the rest of its block (S = {unit})" in t.comm[0] for t in block.tensors)
    assert any("padded" in c for t in tensors(lay) for c in t.comm)  # 37 rows over 2 or 3


def test_what_cannot_be_laid_out_is_refused():
    gpt, mlp = describe(*MODELS[0]), describe(*MODELS[2])
    for model, strategy, world in [(mlp, "tp_megatron", 2), (gpt, "tp_dtensor", 3),
                                   (gpt, "gpipe", 4), (gpt, "nonsense", 2),
                                   ({**gpt, "hidden": "64"}, "ddp", 2),
                                   ({**gpt, "kind": "rnn"}, "ddp", 2), (gpt, "ddp", 0)]:
        with pytest.raises(ValueError):
            layout(model, strategy, world)


@pytest.mark.parametrize("experiment", ["zero", "tensor_parallel", "pipeline"])
def test_held_bytes_are_what_a_real_run_measured(tmp_path_factory, experiment):
    result = json.loads((lab_output(tmp_path_factory, experiment) / "result.json").read_text())
    p = result["params"]
    for entry in result["strategies"]:
        lay = layout(result["model"], entry["strategy"], entry["ranks"],
                     micro_batches=p.get("micro_batches", 1),
                     bucket_cap_mb=p.get("bucket_cap_mb", 0.25), batch_size=p["batch_size"])
        measured = [m["measured"]["params"] for m in entry["memory"]]
        assert lay.held_bytes() == measured, entry["strategy"]
