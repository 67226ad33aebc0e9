"""Real torch.distributed runs on CPU/gloo through the real launcher: every strategy
against the single-device reference, counted bytes against the cost model (PyTorch's own
strategies' too), memory from live storage against the formula, the pipeline schedules'
activation footprints, and the result/progress contract.

Four of the runs are other tests' too (lab_helpers.shared): world 4's ZeRO is
test_lab_matrix's zero-4 run, the world-2 data-parallel, pipeline and tensor-parallel runs
are the views' (tests/real_runs.py)."""

from __future__ import annotations

import json
import re

import pytest
from lab_helpers import NCCL_LIKE, TINY, launch, shared

from base import contract
from tests.real_runs import PARAMS

PROGRESS = re.compile(r"^progress step=(\d+) total=(\d+)( [a-z_]+=\S+)*$")


@pytest.fixture(scope="module")
def dp2(tmp_path_factory):
    """The views' data-parallel run: every strategy at world 2, 2 micro-batches, buckets
    of 0.01 MB."""
    return shared(tmp_path_factory, "data_parallel", PARAMS["data_parallel"])


@pytest.fixture(scope="module")
def zero4(tmp_path_factory):
    """test_lab_matrix's zero-4 run: every ZeRO strategy (zero3 too, which the checks of
    every strategy here hold for as well), under its nccl-like process group."""
    params = {**TINY, "world_size": 4, "steps": 1, "warmup": 0, "bucket_cap_mb": 0.02}
    return shared(tmp_path_factory, "zero", params, env=NCCL_LIKE)


@pytest.fixture(scope="module")
def pp2(tmp_path_factory):
    """The views' pipeline run: 2 stages, 4 micro-batches, 4 layers, every schedule."""
    return shared(tmp_path_factory, "pipeline", PARAMS["pipeline"])


@pytest.fixture(scope="module")
def pp4(tmp_path_factory):
    params = {**TINY, "world_size": 4, "micro_batches": 4, "layers": 4, "steps": 1,
              "warmup": 0, "model": "mlp", "strategies": ["gpipe", "1f1b"]}
    return launch("pipeline", params, tmp_path_factory.mktemp("pp4"))


@pytest.fixture(scope="module")
def tp2(tmp_path_factory):
    """The views' tensor-parallel run: single, tp_megatron and tp_dtensor at world 2."""
    return shared(tmp_path_factory, "tensor_parallel", PARAMS["tensor_parallel"])


def _assert_all_passed(run):
    assert run.rc == 0, run.stderr[-3000:]
    result = run.result
    assert result["status"] == "succeeded" and result["reason"] is None
    for s in result["strategies"]:
        c = s["correctness"]
        assert c["passed"], (s["strategy"], c["reason"])
        assert c["all_params_have_grad"] and c["replicas_bit_identical"]
        assert c["max_grad_abs_error"] <= 1e-5 and c["max_param_abs_error"] <= 1e-5
        assert c["loss_abs_error"] <= 1e-5
        assert c["tensors_checked"] > 1
        assert s["step_time_s"]["median"] > 0 and s["tokens_per_s"] > 0
        pred = s["prediction"]
        assert pred["step_time_s"] > 0 and s["dominant_term"] in pred["terms_s"]
        assert sum(pred["terms_s"].values()) == pytest.approx(pred["step_time_s"])
        assert pred["residual_s"] == pytest.approx(s["step_time_s"]["median"]
                                                   - pred["step_time_s"])
        assert pred["unmodelled"]  # what the model knows it leaves out, always said
        assert s["ratios"]["step_time"] > 0
        _assert_memory_within_10_percent(s)


def _assert_memory_within_10_percent(entry):
    """Live storage (independent of the formula) against the formula, every rank."""
    for m in entry["memory"]:
        peak = m["peak"]
        assert peak["measured"] > peak["step_start"] > 0
        assert 0.9 <= peak["ratio"] <= 1.1, (entry["strategy"], m["rank"], peak)
        assert peak["predicted"] == pytest.approx(sum(peak["formula"]["held"].values())
                                                  + sum(peak["formula"]["transient"].values()))


def _buffers(entry) -> set[str]:
    """Every named term of the memory formula, held or at the peak's moment."""
    return {k for m in entry["memory"] for part in ("held", "transient")
            for k in m["peak"]["formula"][part]}


def _assert_bytes_exact(entry):
    comm = entry["comm"]
    assert comm["all_exact"] is True, comm["bytes_vs_predicted"]
    for row in comm["bytes_vs_predicted"]:
        assert row["counted_bytes"] == row["predicted_bytes"] > 0
        if row["predicted_calls"] is not None:
            assert row["counted_calls"] == row["predicted_calls"]
    if comm["instrumented"]:  # the wrapper over the timed steps; the census agrees
        assert all(r["constant_across_steps"] and r["census_agrees"] for r in comm["per_rank"])
    else:  # PyTorch's own: counted by the census, from the dispatcher
        assert comm["source"].startswith("dispatcher census")


def test_data_parallel_matches_reference_and_counts_exact_bytes(dp2):
    _assert_all_passed(dp2)
    P = dp2.result["model"]["params"]
    for name in ("dp_naive", "dp_bucket", "ddp"):
        entry = dp2.strategy(name)
        _assert_bytes_exact(entry)
        # no_sync: one all_reduce of P*4 bytes per step although there are 2 micro-batches
        assert entry["comm"]["bytes_vs_predicted"][0]["counted_bytes"] == 4 * P
        # the model state the strategy lists is what the formula says it is
        assert entry["memory"][0]["ratio"] == pytest.approx(1.0)
    # DDP's calls are its buckets, rebuilt after its first step: predicted exactly too
    assert dp2.strategy("ddp")["comm"]["bytes_vs_predicted"][0]["predicted_calls"] > 1
    assert "DDP buckets" in _buffers(dp2.strategy("ddp"))
    assert "bucket buffers" in _buffers(dp2.strategy("dp_bucket"))
    assert dp2.strategy("dp_bucket")["extra"][0]["buckets"] > 1
    assert dp2.strategy("single")["ranks"] == 1
    cal = dp2.result["calibration"]
    fit = cal["links"]["all_reduce"]
    assert fit["rms_rel_error"] >= 0 and len(fit["samples"]) >= 4  # a sweep, not 2 sizes
    assert cal["gemm_shapes"] > 0 and cal["op_s"] > 0
    # the per-operator overhead probed again after every timed round, its spread recorded
    spread = cal["op_spread"]
    assert spread["n"] >= 1 + PARAMS["data_parallel"]["steps"]
    assert spread["min"] <= min(cal["op_s"], spread["median"]) and spread["kept"] == "calibration"
    assert max(cal["op_s"], spread["median"]) <= spread["max"]


def test_progress_lines_and_result_contract(dp2):
    lines = [ln for ln in dp2.stdout.splitlines() if ln.startswith("progress ")]
    assert lines
    steps = []
    for ln in lines:
        m = PROGRESS.match(ln)
        assert m, ln
        steps.append((int(m.group(1)), int(m.group(2))))
    # from its first line the run says what it does: the launcher, torchrun's agent and
    # rank 0 in turn, each phase in the order base/contract.py lists them
    phases = [contract.parse_progress(ln)[2].get("phase") for ln in lines]
    assert phases[:4] == ["launching", "loading", "starting", "preparing"]
    firsts = list(dict.fromkeys(p for p in phases if p))
    assert firsts == [p for p in contract.PHASES if p in firsts]
    assert {"gate", "calibrating", "warmup", "timed", "memory"} <= set(firsts)
    counted = [s for s, _ in steps if s]  # a phase's line repeats the step it is at
    assert sorted(set(counted)) == list(range(1, counted[-1] + 1)) and counted == sorted(counted)
    assert steps[-1][0] == steps[-1][1]
    assert any("strategy=ddp" in ln and "tokens_per_s=" in ln for ln in lines)
    assert "result status=succeeded" in dp2.stdout
    r = dp2.result
    assert r["schema_version"] == 1 and r["experiment"] == "data_parallel"
    assert r["params"]["world_size"] == 2
    env = r["environment"]
    for key in ("torch", "backend", "device", "host", "world_size", "device_model"):
        assert key in env
    assert env["backend"] == "gloo"
    events = [json.loads(ln) for ln in (dp2.out / "events.jsonl").read_text().splitlines()]
    assert {e["rank"] for e in events} == {0, 1}
    kinds = {e["kind"] for e in events}
    assert {"forward", "backward", "all_reduce", "step"} <= kinds
    assert all(e["t1"] >= e["t0"] for e in events)
    assert [e["t0"] for e in events] == sorted(e["t0"] for e in events)
    timeline = dp2.strategy("dp_naive")["timeline"][0]["by_kind"]
    assert timeline["all_reduce"]["count"] > 0


def test_zero_world_4_matches_reference_and_saves_memory(zero4):
    _assert_all_passed(zero4)
    for name in ("ddp", "zero1", "zero2", "fsdp2"):
        _assert_bytes_exact(zero4.strategy(name))
    z = zero4.strategy("zero1")["comm"]["bytes_vs_predicted"]
    assert {row["kind"] for row in z} == {"reduce_scatter", "all_gather"}
    # FSDP2: the blocks gathered twice, the root (kept unsharded for backward) once
    fsdp = {r["kind"]: r for r in zero4.strategy("fsdp2")["comm"]["bytes_vs_predicted"]
            if r["rank"] == 0}
    layers = TINY["layers"]
    assert (fsdp["all_gather"]["counted_calls"], fsdp["reduce_scatter"]["counted_calls"]) == \
        (2 * layers + 1, layers + 1)
    state = {n: zero4.strategy(n)["memory"][0]["measured"]["total"]
             for n in ("ddp", "zero1", "zero2", "fsdp2")}
    assert state["ddp"] > state["zero1"] > state["zero2"] > state["fsdp2"]
    peaks = {n: zero4.strategy(n)["memory"][0]["peak"]["measured"]
             for n in ("ddp", "zero1", "zero2", "fsdp2")}
    assert peaks["ddp"] > max(peaks["zero1"], peaks["zero2"], peaks["fsdp2"])
    # ZeRO-1 holds its gradients in buckets, reduce-scattered in place: no second copy
    # of its slice, nothing staged
    assert all("grads" in m["peak"]["formula"]["held"] for m in zero4.strategy("zero1")["memory"])
    assert not {"grad shards", "staging"} & _buffers(zero4.strategy("zero1"))
    assert "root unsharded" in _buffers(zero4.strategy("fsdp2"))


def test_pipeline_matches_reference_and_holds_expected_activations(pp2):
    _assert_all_passed(pp2)
    for name in ("naive_mp", "gpipe", "1f1b", "torch_gpipe", "torch_1f1b"):
        _assert_bytes_exact(pp2.strategy(name))
    assert "sends held" in _buffers(pp2.strategy("gpipe"))
    assert "receive buffers" in _buffers(pp2.strategy("torch_1f1b"))
    m, p = 4, 2
    for name, expected in (("gpipe", lambda r: m), ("1f1b", lambda r: min(p - r, m)),
                           ("naive_mp", lambda r: 1)):
        entry = pp2.strategy(name)
        for extra, mem in zip(entry["extra"], entry["memory"], strict=True):
            r = extra["rank"]
            assert extra["max_in_flight"] == expected(r)
            # saved activations at the peak = micro-batches held x one micro-batch's
            held = mem["saved_activation_peak_bytes"] / extra["one_micro_batch_saved_bytes"]
            assert held == pytest.approx(expected(r), rel=0.02)
    assert pp2.strategy("gpipe")["bubble"]["predicted"] == pytest.approx(1 / 5)
    assert pp2.strategy("naive_mp")["bubble"]["predicted"] == pytest.approx(1 / 2)
    assert pp2.strategy("gpipe")["bubble"]["measured_idle_fraction"] is not None


def test_pipeline_exchange_is_sampled_again_after_every_timed_round(pp2):
    # the send/recv link probed once before the steps can read half or twice what the
    # steps' exchanges cost: timed again after every timed round, recorded with its
    # spread; a pipeline's messages are priced back to back (no link after compute)
    cal = pp2.result["calibration"]
    assert "send_recv+after_compute" not in cal["links"]
    drift = cal["link_drift"]["send_recv"]
    assert drift["n"] == len(drift["ratios"]) >= PARAMS["pipeline"]["steps"]
    assert 0 < drift["min"] <= drift["median"] <= drift["max"]
    for name in ("gpipe", "1f1b", "torch_1f1b"):
        assert "send_recv" not in pp2.strategy(name)["prediction"]["after_compute_share"]


def test_pipeline_four_stages_one_f_one_b_in_flight(pp4):
    _assert_all_passed(pp4)
    inflight = {n: [e["max_in_flight"] for e in pp4.strategy(n)["extra"]]
                for n in ("gpipe", "1f1b")}
    assert inflight == {"gpipe": [4, 4, 4, 4], "1f1b": [4, 3, 2, 1]}
    for n in ("gpipe", "1f1b"):
        _assert_bytes_exact(pp4.strategy(n))
    assert pp4.result["model"]["kind"] == "mlp"


def test_tensor_parallel_matches_reference_and_counts_four_all_reduces_per_layer(tp2):
    _assert_all_passed(tp2)
    entry = tp2.strategy("tp_megatron")
    _assert_bytes_exact(entry)
    p = tp2.result["params"]
    L, B, s, h = p["layers"], p["batch_size"], p["seq_len"], p["hidden"]
    row = entry["comm"]["bytes_vs_predicted"][0]
    assert row["counted_bytes"] == 4 * L * B * s * h * 4 and row["counted_calls"] == 4 * L
    # DTensor's plan all-reduces each column-parallel input's gradient: 6 per layer
    dt = tp2.strategy("tp_dtensor")
    _assert_bytes_exact(dt)
    assert dt["comm"]["bytes_vs_predicted"][0]["counted_calls"] == 6 * L
    # each rank holds its shards plus the replicated parameters
    P = tp2.result["model"]["params"]
    assert entry["memory"][0]["measured"]["params"] < 4 * P
    assert dt["correctness"]["max_grad_abs_error"] <= 1e-5
