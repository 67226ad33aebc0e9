"""Expert parallelism (the experts experiment): the load per expert adds up to the
tokens routed, capacity drops tokens when it is small, ep_alltoall passes the gate at
worlds 2 and 4 with exact all-to-all bytes, and a dispatch that sends tokens to the
wrong rank is caught by the gate."""

from __future__ import annotations

import torch
from lab_helpers import NCCL_LIKE, PLUGINS, TINY, launch, shared

from jobs.lab.catalogue import registry
from jobs.lab.components.model import ModelConfig, build_model, make_batch
from jobs.lab.components.moe import MoE
from jobs.lab.predict import experts as moecost

RUN = {**TINY, "steps": 1, "warmup": 0, "experts": 4, "strategies": ["ep_alltoall"]}


def _cfg(**kw) -> ModelConfig:
    return ModelConfig(layers=2, hidden=32, heads=4, seq_len=16, vocab=64, experts=4, **kw)


def test_param_count_and_flops_of_the_moe_gpt():
    for k in (1, 2):
        cfg = _cfg(top_k=k)
        assert sum(p.numel() for p in build_model(cfg).parameters()) == cfg.param_count()
        dense = ModelConfig(layers=2, hidden=32, heads=4, seq_len=16, vocab=64)
        router = 6 * 2 * 32 * 4
        expert = 6 * 2 * (8 * 32 * 32 + 5 * 32)
        assert cfg.flops_per_token() == dense.flops_per_token() + router + (k - 1) * expert
    assert ModelConfig().param_count() == ModelConfig(experts=0).param_count()


def test_load_sums_to_routed_tokens_and_small_capacity_drops():
    for k, factor in ((1, 4.0), (2, 4.0), (1, 0.5), (2, 0.5)):
        cfg = _cfg(top_k=k, capacity_factor=factor)
        model = build_model(cfg)
        batch = make_batch(cfg, 8)
        with torch.no_grad():
            model(batch.inputs)
        for blk in model.blocks.values():
            assert isinstance(blk.mlp, MoE)
            load, kept = blk.mlp.last_load
            assert int(load.sum()) == k * 8 * cfg.seq_len
            C = moecost.capacity(4, k, factor, cfg.seq_len)
            assert (kept <= 8 * C).all() and (kept <= load).all()
            dropped = int(load.sum() - kept.sum())
            assert (dropped > 0) == (factor < 1), (k, factor, load, kept)


def test_ep_alltoall_passes_the_gate_at_worlds_2_and_4_with_exact_bytes(tmp_path_factory):
    for world, k, factor in ((2, 1, 0.5), (4, 2, 1.0)):
        params = {**RUN, "world_size": world, "top_k": k, "capacity_factor": factor}
        registry.validate("experts", params)
        if world == 2:
            run = launch("experts", params, tmp_path_factory.mktemp("w2"))
        else:  # test_lab_matrix's experts-4 run: `single` beside, its nccl-like group
            del params["strategies"]
            run = shared(tmp_path_factory, "experts", params, env=NCCL_LIKE)
        assert run.rc == 0, (run.stderr[-3000:], run.stdout[-2000:])
        s = run.strategy("ep_alltoall")
        c = s["correctness"]
        assert c["passed"] and c["coverage_exact"] and c["max_rel_error"] < 1e-4, c["reason"]
        assert s["comm"]["all_exact"] is True, s["comm"]["bytes_vs_predicted"]
        b = 8 // world
        for row in s["comm"]["bytes_vs_predicted"]:
            if row["kind"] == "all_to_all":
                C = moecost.capacity(4, k, factor, 16)
                assert row["counted_bytes"] == 4 * 2 * 4 * b * C * 32 * 4
                assert row["counted_calls"] == 4 * 2
        for m in s["memory"]:
            assert 0.9 <= m["peak"]["ratio"] <= 1.1, m["peak"]
        extra = s["extra"]
        assert len(extra) == world
        for e in extra:  # every rank reports the same, summed over the ranks
            assert e["load_per_expert"] == extra[0]["load_per_expert"]
            for load, kept in zip(e["load_per_expert"], e["kept_per_expert"], strict=True):
                assert sum(load) == k * 8 * 16
                assert all(kk <= ll for kk, ll in zip(kept, load, strict=True))
            assert e["dropped"] == sum(e["dropped_per_layer"])
            assert e["dense_baseline"]["step_time_s"] > 0
        assert extra[0]["experts_on_rank"] == list(range(4 // world))
        if factor < 1:
            assert extra[0]["dropped"] > 0


def test_a_dispatch_to_the_wrong_rank_is_caught_by_the_gate(tmp_path):
    run = launch("experts", {**RUN, "world_size": 2}, tmp_path,
                 env={"COMMONPLACE_LAB_PLUGIN": str(PLUGINS / "ep_wrong_rank.py")})
    assert run.rc == 3, run.stderr[-2000:]
    assert run.result["reason"]["code"] == "correctness"
    c = run.strategy("ep_alltoall")["correctness"]
    assert not c["passed"] and "differs from the single-device reference" in c["reason"]


def test_the_card_shows_the_load_per_expert_and_the_dense_baseline():
    from app.journal.views.card_experts import experts
    extra = {"rank": 0, "load_per_expert": [[3, 5], [8, 0]], "kept_per_expert": [[3, 4], [4, 0]],
             "drop_fraction": 5 / 16, "dense_baseline": {"what": "the dense GPT",
                                                         "step_time_s": 0.01,
                                                         "moe_step_time_s": 0.02}}
    html = experts([{"strategy": "ep_alltoall", "extra": [extra]}, {"strategy": "single"}])
    assert "<th scope=\"col\">E1</th>" in html and "2.00×" in html
    assert '<td class="num">1</td></tr>' in html and '<td class="num">4</td></tr>' in html
    assert experts([{"strategy": "single", "extra": []}]) == ""
