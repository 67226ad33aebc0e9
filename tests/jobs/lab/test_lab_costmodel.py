"""Formulas of the cost model against direct counts (in process, no ranks)."""

from __future__ import annotations

import pytest
import torch

from jobs.lab.components.census import OpCensus
from jobs.lab.components.instrument import SavedActivations
from jobs.lab.components.model import ModelConfig, build_model, make_batch
from jobs.lab.experiments import timers
from jobs.lab.predict import calibration, cost, memory, schedule
from jobs.lab.strategies.pipeline_parallel import Stage
from jobs.lab.strategies.tensor_parallel import ColumnParallelLinear


@pytest.mark.parametrize("kind,tied", [("gpt", False), ("gpt", True), ("mlp", False)])
@pytest.mark.parametrize("L,h,heads,s,v",
                         [(1, 8, 2, 4, 16), (3, 32, 4, 16, 50), (4, 64, 8, 8, 256)])
def test_param_count_is_exact(kind, tied, L, h, heads, s, v):
    cfg = ModelConfig(kind=kind, layers=L, hidden=h, heads=heads, seq_len=s, vocab=v,
                      tie_head=tied)
    model = build_model(cfg)
    assert sum(p.numel() for p in model.parameters()) == cfg.param_count()


def test_gpt2_124m_is_124m_with_a_tied_head():
    dims = ("gpt", 12, 768, 1024, 50304)
    assert cost.param_count(*dims) == pytest.approx(163.0e6, rel=1e-3)  # untied
    assert cost.param_count(*dims, tied=True) == pytest.approx(124.5e6, rel=1e-3)
    # the tied embedding is the head's matmul: counted once, as nanoGPT's N (123.7M)
    assert cost.matmul_params(*dims, tied=True) == pytest.approx(123.7e6, rel=1e-3)
    assert cost.matmul_params(*dims) == cost.matmul_params(*dims, tied=True)


def test_one_rank_communicates_for_free():
    # world_size=1 has no link to calibrate: its collectives are predicted to cost nothing
    cal = calibration.Calibration(flops=1e9, peak_flops=1e9, n=1)
    assert cal.coll("all_reduce", 1 << 20, 10) == 0.0
    assert cal.comm({"all_reduce": {"bytes": 1 << 20, "count": 3}}) == 0.0


def test_a_collective_is_priced_with_its_own_group_sizes_link():
    world = calibration.LinkFit(alpha=14.8e-3, bandwidth=1e8)  # 8 ranks on 2 shared cores
    pair = calibration.LinkFit(alpha=0.5e-3, bandwidth=1e9)
    cal = calibration.Calibration(flops=1e9, peak_flops=1e9, n=8,
                                links={"all_reduce": world, "all_reduce@2": pair})
    assert calibration.link_key("all_reduce", 2, 8) == "all_reduce@2"
    assert calibration.link_key("all_reduce", 8, 8) == calibration.link_key("all_reduce", 0, 8) \
        == "all_reduce"
    assert calibration.link_key("send_recv", 2, 8) == "send_recv"  # the world's ring probes p2p
    S = 1 << 16
    assert cal.coll("all_reduce", S, 4, n=2) == pytest.approx(4 * pair.time("all_reduce", S / 4, 2))
    assert cal.coll("all_reduce", S, 4) == pytest.approx(4 * world.time("all_reduce", S / 4, 8))
    table = {"all_reduce": {"bytes": S, "count": 4}}
    assert cal.comm(table, 2) < cal.comm(table) / 10
    del cal.links["all_reduce@2"]  # none calibrated for the group: the world's, at n ranks
    assert cal.coll("all_reduce", S, 4, n=2) == \
        pytest.approx(4 * world.time("all_reduce", S / 4, 2))


@pytest.mark.parametrize("kind", ["gpt", "mlp"])
@pytest.mark.parametrize("L,p", [(4, 2), (5, 2), (7, 4), (4, 4)])
def test_stage_params_partition_the_model(kind, L, p):
    h, s, v = 16, 8, 32
    cfg = ModelConfig(kind=kind, layers=L, hidden=h, heads=2, seq_len=s, vocab=v)
    counts = []
    for rank in range(p):
        stage = Stage(build_model(cfg), rank, p)
        counts.append(sum(q.numel() for q in stage.parameters()))
        assert counts[-1] == cost.stage_params(kind, L, h, s, v, p, rank)
    assert sum(counts) == cfg.param_count()
    layers = [list(cost.stage_layers(L, p, r)) for r in range(p)]
    assert sum(layers, []) == list(range(L))


def test_tp_split_matches_the_split_modules():
    L, h, s, v = 2, 16, 8, 32
    split, rep = cost.tp_split_params(L, h, s, v)
    model = build_model(ModelConfig(layers=L, hidden=h, heads=4, seq_len=s, vocab=v))
    col = sum(m.weight.numel() + m.bias.numel() for blk in model.blocks.values()
              for m in (blk.attn.q, blk.attn.k, blk.attn.v, blk.mlp.fc))
    row = sum(m.weight.numel() for blk in model.blocks.values()
              for m in (blk.attn.proj, blk.mlp.proj))
    assert split == col + row and split + rep == cost.param_count("gpt", L, h, s, v)
    shard = ColumnParallelLinear(model.blocks["0"].mlp.fc, rank=1, t=2)
    assert torch.equal(shard.weight, model.blocks["0"].mlp.fc.weight[2 * h:])


@pytest.mark.parametrize("p,m,expected", [(2, 1, 0.5), (4, 4, 3 / 7), (4, 16, 3 / 19),
                                          (1, 8, 0.0)])
def test_bubble_fraction(p, m, expected):
    assert cost.bubble_fraction(p, m) == pytest.approx(expected)


def test_busbw_factors_follow_nccl_tests():
    assert cost.busbw_factor("all_reduce", 8) == pytest.approx(1.75)
    assert cost.busbw_factor("all_gather", 4) == pytest.approx(0.75)
    assert cost.busbw_factor("reduce_scatter", 2) == pytest.approx(0.5)
    assert cost.busbw_factor("broadcast", 8) == 1.0
    assert cost.busbw_factor("send_recv", 2) == 1.0


def test_fit_link_recovers_alpha_and_bandwidth_and_reports_its_error():
    alpha, W, n = 2e-4, 1.5e9, 4
    samples = [(S, alpha + cost.busbw_factor("all_reduce", n) * S / W)
               for S in (1 << 10, 1 << 14, 1 << 18, 1 << 22)]
    fit = calibration.fit_link("all_reduce", n, samples)
    assert fit.alpha == pytest.approx(alpha, rel=1e-6)
    assert fit.bandwidth == pytest.approx(W, rel=1e-6)
    assert fit.rms_rel_error < 1e-9 and fit.samples == samples
    noisy = [(S, t * (1.2 if i % 2 else 0.8)) for i, (S, t) in enumerate(samples)]
    rough = calibration.fit_link("all_reduce", n, noisy)
    assert 0.1 < rough.rms_rel_error <= rough.max_rel_error < 0.5
    assert fit.fallback is None and rough.fallback is None  # lines, however rough


def test_fit_link_says_when_no_line_fits_and_its_w_is_a_guess():
    """Times that shrink with the size (a busy host): no line has a bandwidth above zero,
    and the largest took no longer than the smallest, so W is a thousand times the largest
    sample's bus bandwidth; the fit says so."""
    n, f = 4, cost.busbw_factor("all_reduce", 4)
    flat = [(1 << 10, 2e-3), (1 << 14, 1e-3), (1 << 18, 5e-4)]
    fit = calibration.fit_link("all_reduce", n, flat)
    assert fit.fallback == ("the times did not grow with the size, so W is a thousand "
                            "times the largest sample's bus bandwidth")
    assert fit.alpha == 5e-4 and fit.bandwidth == pytest.approx(1000 * f * (1 << 18) / 5e-4)
    # on a line that starts below zero: the guess is from the smallest and the largest,
    # which grew, so W is theirs
    below = [(1000, 1e-6), (2000, 3e-6), (3000, 5e-6)]
    fit = calibration.fit_link("all_reduce", n, below)
    assert fit.fallback == "the best line's latency was below zero"
    assert fit.alpha == 1e-6 and fit.bandwidth == pytest.approx(f * 3000 / (5e-6 - 1e-6))


@pytest.mark.parametrize("cap,pad", [(10, 1), (100, 4), (10**9, 2), (1, 3)])
def test_bucket_plan_covers_every_param_once_and_pads(cap, pad):
    numels = [7, 64, 3, 128, 1, 50]
    plan = cost.plan_buckets(numels, cap, pad)
    seen = sorted(i for b in plan for i in b["params"])
    assert seen == list(range(len(numels)))
    for b in plan:
        assert b["numel"] == sum(numels[i] for i in b["params"])
        assert b["padded"] % pad == 0 and 0 <= b["padded"] - b["numel"] < pad
    # gradients arrive last-layer first: the first bucket holds the last parameter
    assert plan[0]["params"][0] == len(numels) - 1


@pytest.mark.parametrize("precision,expected", [
    # ZeRO paper, K = 12: DP (2+2+12)P, ZeRO-1 (2+2+12/d)P, ZeRO-2 (2+(2+12)/d)P, 16P/d
    ("bf16_adamw", lambda P, d: (16 * P, (4 + 12 / d) * P, (2 + 14 / d) * P, 16 * P / d)),
    ("fp32_sgd", lambda P, d: (12 * P, (8 + 4 / d) * P, (4 + 8 / d) * P, 12 * P / d)),
])
def test_model_state_follows_the_zero_paper(precision, expected):
    P, d = 1000, 4
    got = tuple(memory.model_state(precision, P, stage=k, d=d)["total"] for k in range(4))
    assert got == pytest.approx(expected(P, d))


def test_comm_formulas():
    assert cost.tp_comm(3, 2, 8, 16, 4)["all_reduce"] == {"bytes": 4 * 3 * 2 * 8 * 16 * 4,
                                                               "count": 12}
    assert cost.tp_comm(3, 2, 8, 16, 2, 6)["all_reduce"]["count"] == 18  # DTensor's plan
    # FSDP2: each parameter padded to ceil(dim0/d) rows; the root gathered once
    assert cost.fsdp_padded([(5, 3), (4,)], 2) == 6 * 3 + 4
    f = cost.fsdp_comm([[(5, 3)], [(4,)]], 2, 2, 4, regathered=[True, False])
    assert f == {"all_gather": {"bytes": (2 * 18 + 4) * 2, "count": 3},
                 "reduce_scatter": {"bytes": (18 + 4) * 4, "count": 2}}
    assert cost.pp_comm(0, 2, 4, 100) == {"send": {"bytes": 400, "count": 4},
                                               "recv": {"bytes": 400, "count": 4}}
    assert cost.pp_comm(1, 3, 4, 100)["send"]["bytes"] == 800
    z = cost.zero_comm([5, 6], 4, 4, 10**9)
    assert z["reduce_scatter"]["bytes"] == z["all_gather"]["bytes"] == 12 * 4


def test_saved_activation_meter_counts_storages_once_and_frees():
    model = build_model(ModelConfig(layers=2, hidden=16, heads=2, seq_len=8, vocab=32))
    batch = make_batch(model.cfg, 2)
    meter = SavedActivations(list(model.parameters()))
    with meter:
        loss = model(batch.inputs).sum()
        held = meter.current
    assert held > 0 and meter.peak == held
    loss.backward()
    assert meter.current == 0
    with meter:
        a = model(batch.inputs).sum()
        b = model(batch.inputs.clone()).sum()
    # two forwards on distinct inputs hold exactly twice one forward's activations
    # (the same input tensor twice would be counted once: it is one storage)
    assert meter.peak == 2 * held
    (a + b).backward()


def test_the_census_sees_shapes_bytes_and_views_and_prices_them():
    lin = torch.nn.Linear(8, 4)
    x = torch.randn(3, 8, requires_grad=True)
    census = OpCensus()
    with census:
        lin(x).sum().backward()
    phase = census.profile()["phases"]["step"]
    # forward addmm (3x8 @ 8x4, the weight transposed); backward: dX and dW mm's
    assert phase["gemm"][("addmm", (3, 8), "n", (8, 4), "t", "float32")] == 1
    assert sum(phase["gemm"].values()) == 3
    assert phase["views"] > 0 and phase["ops"] > 0 and phase["bytes"] > 0
    assert census.profile()["collectives"] == {}
    cal = calibration.Calibration(flops=1, peak_flops=1, op_s=1e-6, bandwidth=1e9,
                                gemm_s=dict.fromkeys(phase["gemm"], 1e-3))
    t = cal.compute({"step": phase})
    assert t["gemm"] == pytest.approx(3e-3)
    assert t["op_overhead"] == pytest.approx((phase["ops"] + phase["views"]) * 1e-6)
    assert t["memory_traffic"] == pytest.approx(phase["bytes"] / 1e9)


def test_a_gpu_step_is_priced_as_max_of_host_and_device_a_cpu_step_as_their_sum():
    phase = {"gemm": {"g": 10}, "attention": {}, "ops": 100, "views": 0, "dtensor_ops": 0,
             "bytes": 0}
    for host_s, device_s in ((5e-3, 1e-3), (1e-3, 5e-3)):  # host-bound, then device-bound
        kw = {"flops": 1, "peak_flops": 1, "op_s": host_s / 100, "gemm_s": {"g": device_s / 10}}
        gpu = calibration.Calibration(**kw, host_overlaps=True).compute({"step": phase})
        cpu = calibration.Calibration(**kw).compute({"step": phase})
        assert sum(gpu.values()) == pytest.approx(max(host_s, device_s))
        assert sum(cpu.values()) == pytest.approx(host_s + device_s)
        assert gpu["gemm"] == cpu["gemm"] == pytest.approx(device_s)


def test_the_pipeline_formula_for_equal_stages_is_m_plus_p_minus_1_slots():
    fb = [dict.fromkeys(cost.COMPUTE_TERMS, 0.0) | {"gemm": 0.4}] * 4  # 0.1 per mb
    opt = [dict.fromkeys(cost.COMPUTE_TERMS, 0.0)] * 4
    pred = cost.predict_pipeline(fb, opt, m=4, t_p2p=0.01)
    # the end stages wait for one receive a micro-batch, the middle ones for two:
    # slots 0.11, 0.12, 0.12, 0.11, then 3 more at the slowest's 0.12
    assert pred["step_time_s"] == pytest.approx(0.46 + 3 * 0.12)
    assert pred["terms_s"]["comm"] == pytest.approx(4 * 2 * 0.01)
    assert sum(pred["terms_s"].values()) == pytest.approx(pred["step_time_s"])
    assert pred["bubble_fraction"] == pytest.approx(3 / 7)


def test_a_two_stage_pipeline_pays_each_message_once_at_its_receiver():
    # GPipe / 1F1B on 2 stages: stage 0 waits for each gradient, stage 1 for each
    # activation; their sends are not waited for, so each slot holds one t_p2p, not two
    assert cost.receive_waits(2) == [1.0, 1.0]
    fb = [dict.fromkeys(cost.COMPUTE_TERMS, 0.0) | {"gemm": 0.4}] * 2
    opt = [dict.fromkeys(cost.COMPUTE_TERMS, 0.0)] * 2
    pred = cost.predict_pipeline(fb, opt, m=4, t_p2p=0.01)
    assert pred["step_time_s"] == pytest.approx((4 + 2 - 1) * (0.1 + 0.01))
    assert pred["terms_s"]["comm"] == pytest.approx(4 * 0.01)


def test_a_split_backward_pays_its_operators_overhead_once_more_inside_the_slots():
    # the backward's priced terms: only the per-operator overhead is paid again by the
    # second (weight-gradient) autograd pass; GEMMs and bytes are not repeated
    backward = {"gemm": 0.2, "attention": 0.0, "op_overhead": 0.12, "memory_traffic": 0.03}
    assert cost.split_backward_s(backward) == pytest.approx(0.12)
    assert cost.split_backward_s({}) == 0.0  # a rank with no backward phase
    fb = [dict.fromkeys(cost.COMPUTE_TERMS, 0.0) | {"gemm": 0.4, "op_overhead": 0.2}] * 2
    opt = [dict.fromkeys(cost.COMPUTE_TERMS, 0.0)] * 2
    split = [{"split_backward": cost.split_backward_s(backward)}] * 2
    pred = cost.predict_pipeline(fb, opt, m=4, t_p2p=0.01, inside=split)
    # slot = (0.6 + 0.12) / 4 + 0.01 = 0.19, five of them on 2 stages
    assert pred["step_time_s"] == pytest.approx(5 * 0.19)
    assert pred["terms_s"]["split_backward"] == pytest.approx(0.12)
    assert sum(pred["terms_s"].values()) == pytest.approx(pred["step_time_s"])


def test_interleaved_ranks_wait_once_per_batch_of_receives():
    # p = 2, v = 2, m = 4: each rank posts 13 / 11 batches, 10 of them with a receive
    # (12 receives: the steady state's batches receive an activation and a gradient)
    assert [schedule.receive_waits(2, 4, 2, r) for r in (0, 1)] == [10, 10]
    # PyTorch's schedule runtime waits for each of the 12 alone
    assert [schedule.receive_waits(2, 4, 2, r, batched=False) for r in (0, 1)] == [12, 12]


def test_calls_after_compute_are_priced_with_the_link_probed_after_compute():
    # 4 all-reduces on 2-rank groups of an 8-rank world, 3 of them right after a matmul:
    # those 3 at the link probed after compute, the fourth at the burst's
    burst = calibration.LinkFit(alpha=0.3e-3, bandwidth=1e9)
    after = calibration.LinkFit(alpha=1.8e-3, bandwidth=1e9)
    world = calibration.LinkFit(alpha=5e-3, bandwidth=1e8)
    cal = calibration.Calibration(flops=1, peak_flops=1, n=8, links={
        "all_reduce": world, "all_reduce@2": burst,
        "all_reduce@2" + calibration.AFTER_COMPUTE: after})
    census = {"all_reduce": {"bytes": 4 << 16, "count": 6, "count_by_size": {2: 4, 8: 2},
                             "after_compute_by_size": {2: 3, 8: 0}},
              "send": {"bytes": 1, "count": 1, "count_by_size": {2: 1},
                       "after_compute_by_size": {2: 1}},
              "recv": {"bytes": 1, "count": 1, "count_by_size": {2: 1},
                       "after_compute_by_size": {2: 0}}}
    priced = cal.for_census(census)
    # a pipeline's sends and receives: its schedule prices the wait for the neighbour
    assert priced.after_compute == {"all_reduce@2": 0.75, "all_reduce": 0.0}
    assert cal.after_compute == {}  # the run's calibration is not changed
    S = 1 << 16
    one_burst, one_after = burst.time("all_reduce", S, 2), after.time("all_reduce", S, 2)
    assert priced.coll("all_reduce", 4 * S, 4, n=2) == pytest.approx(one_burst + 3 * one_after)
    assert cal.coll("all_reduce", 4 * S, 4, n=2) == pytest.approx(4 * one_burst)
    # the world's all-reduces came back to back: priced as before, with the world's link
    assert priced.coll("all_reduce", 2 * S, 2) == pytest.approx(
        2 * world.time("all_reduce", S, 8))
    del cal.links["all_reduce@2" + calibration.AFTER_COMPUTE]  # none probed (CUDA): the burst's
    assert cal.for_census(census).coll("all_reduce", 4 * S, 4, n=2) == \
        pytest.approx(4 * one_burst)


def test_how_far_a_link_moved_between_timed_rounds_is_recorded_not_priced():
    # while the steps ran, a pipeline's exchange took 0.5, 2 and 1.5 times its price:
    # kept with its spread, beside the calibration, which prices
    p2p = calibration.LinkFit(alpha=0.5e-3, bandwidth=1e9)
    cal = calibration.Calibration(flops=1, peak_flops=1, n=2, links={"send_recv": p2p})
    S = 1 << 14
    cal.link_ratios = {"send_recv": [0.5, 2.0, 1.5], "all_reduce": []}
    assert cal.coll("send_recv", S) == pytest.approx(p2p.time("send_recv", S, 2))
    assert cal.as_dict()["link_drift"] == {"send_recv": {
        "ratios": [0.5, 2.0, 1.5], "n": 3, "min": 0.5, "median": 1.5, "max": 2.0,
        "kept": "calibration"}}


def test_the_census_counts_the_collectives_that_come_after_compute(tmp_path):
    # a real one-rank gloo group: matmul, all-reduce (after compute), an elementwise op
    # and another all-reduce (back to back: no matmul between), matmul, all-reduce
    import torch.distributed as dist

    if dist.is_initialized():
        pytest.skip("a process group already exists in this process")
    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1),
                            rank=0, world_size=1)
    try:
        a, b = torch.randn(4, 4), torch.randn(4)
        census = OpCensus()
        with census:
            dist.all_reduce(a @ a)
            b.mul_(2)
            dist.all_reduce(b)
            dist.all_reduce(a @ a)
        c = census.profile()["collectives"]["all_reduce"]
    finally:
        dist.destroy_process_group()
    assert c["count"] == 3 and c["count_by_size"] == {1: 3}
    assert c["after_compute_by_size"] == {1: 2}


def test_a_cpu_rank_with_a_quarter_of_a_core_computes_four_times_as_long():
    # the probes count CPU time; eight ranks on two cores each get a quarter of one
    phase = {"gemm": {"g": 2}, "attention": {}, "ops": 100, "views": 10, "dtensor_ops": 0,
             "bytes": 4000}
    kw = {"flops": 1, "peak_flops": 1, "op_s": 1e-6, "gemm_s": {"g": 1e-3}, "bandwidth": 1e6}
    cpu = calibration.Calibration(**kw)
    whole, quarter = cpu.compute({"step": phase}), cpu.compute({"step": phase}, share=0.25)
    assert whole == pytest.approx({"gemm": 2e-3, "attention": 0.0, "op_overhead": 110e-6,
                                   "memory_traffic": 4e-3})
    assert quarter == pytest.approx({k: 4 * v for k, v in whole.items()})
    # on a GPU the device's work is not the host thread's: its share stretches nothing
    gpu = calibration.Calibration(**kw, host_overlaps=True)
    assert gpu.compute({"step": phase}, share=0.25) == gpu.compute({"step": phase})
    assert timers.cpu_share(0.25, 0.75) == 0.25  # on a CPU 1/4 of the time it wanted one
    assert timers.cpu_share(0.0, 0.0) == 1.0  # never wanted one: nothing to stretch


def test_the_kernel_counts_this_threads_time_on_a_cpu():
    before = timers.sched()
    if before is None:
        pytest.skip("this kernel keeps no schedstat")
    a = torch.randn(128, 128)
    for _ in range(200):
        a = torch.tanh(a @ a)
    after = timers.sched()
    assert after[0] > before[0] and after[1] >= before[1]


def test_a_wrapper_s_hooks_are_priced_per_operator_of_each_phase():
    # {phase: seconds per operator} as the hook probe measured it on the wrapper itself
    fwd = {"gemm": {"g": 1}, "attention": {}, "ops": 10, "views": 6, "dtensor_ops": 4,
           "bytes": 0}
    bwd = {**fwd, "ops": 30, "views": 8, "dtensor_ops": 2}
    rate = {"forward": 2e-6, "backward": 1e-6}
    kw = {"flops": 1, "peak_flops": 1, "op_s": 1e-6, "gemm_s": {"g": 1e-4}}
    cpu = calibration.Calibration(**kw)
    priced = cpu.compute({"forward": fwd, "backward": bwd}, hooks=rate)
    assert priced["hooks"] == pytest.approx(20 * 2e-6 + 40 * 1e-6)
    assert "hooks" not in cpu.compute({"forward": fwd})  # no probe: no such term
    # a CPU rank with half a core takes twice as long over its hooks too
    assert cpu.compute({"forward": fwd}, share=0.5, hooks=rate)["hooks"] == \
        pytest.approx(2 * 20 * 2e-6)
    # on a GPU the hooks are the host's, like the per-operator overhead: only what the
    # host takes beyond the device's work shows, and the terms add up to max(host, device)
    gpu = calibration.Calibration(**kw, host_overlaps=True)
    for device_s in (1e-5, 1e-3):
        gpu.gemm_s["g"] = device_s
        t = gpu.compute({"forward": fwd}, hooks=rate)
        host = 16 * 1e-6 + 20 * 2e-6  # operators (DTensor's dispatch unprobed), hooks
        assert sum(t.values()) == pytest.approx(max(host, device_s))
        if host > device_s:  # shared between the two host terms as they were priced
            assert t["hooks"] / t["op_overhead"] == pytest.approx(40 / 16)
        else:
            assert t["hooks"] == t["op_overhead"] == 0.0
