"""The measuring experiments: collective sweep, GEMM roofline, MFU; the GPU script.
The sweep, the roofline and the first MFU run are test_lab_matrix's runs too (collectives-2,
gemm_roofline-1, gpt_mfu-1: lab_helpers.shared), under its nccl-like process group."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from lab_helpers import NCCL_LIKE, ROOT, launch, shared

from jobs.lab.predict import cost


@pytest.fixture(scope="module")
def coll(tmp_path_factory):
    params = {"world_size": 2, "device": "cpu", "min_bytes": 1024, "max_bytes": 16384,
              "iters": 3, "warmup": 1}
    return shared(tmp_path_factory, "collectives", params, env=NCCL_LIKE)


def test_collective_sweep_reports_nccl_tests_bandwidths(coll):
    assert coll.rc == 0, coll.stderr[-2000:]
    r = coll.result
    ops = {"all_reduce", "all_gather", "reduce_scatter", "broadcast", "send_recv", "all_to_all"}
    assert {row["op"] for row in r["table"]} == ops
    assert len(r["table"]) == len(ops) * 5  # 1 KiB .. 16 KiB, doubling
    for row in r["table"]:
        assert row["time_s"] > 0 and row["p10"] <= row["p90"]
        assert row["algbw_Bps"] == pytest.approx(row["bytes"] / row["time_s"])
        factor = cost.busbw_factor(row["op"], 2)
        assert row["busbw_Bps"] == pytest.approx(row["algbw_Bps"] * factor)
        assert row["predicted_s"] > 0 and row["measured_over_predicted"] > 0
    for op in ops:
        assert r["fits"][op]["alpha_s"] >= 0 and r["fits"][op]["busbw_Bps"] > 0
        # the fit says how far from a straight line the link is
        assert 0 <= r["fits"][op]["rms_rel_error"] <= r["fits"][op]["max_rel_error"]
    over = r["wrapper_overhead"]
    assert over["raw_s"] > 0 and over["wrapped_s"] > 0
    lines = [ln for ln in coll.stdout.splitlines() if ln.startswith("progress ")]
    measured = [ln for ln in lines if "busbw_GBps=" in ln]
    assert len(measured) == 30 and lines[-1] == measured[-1]  # a line a size, after the phases


def test_gemm_roofline_places_shapes_under_the_roof(tmp_path_factory):
    run = shared(tmp_path_factory, "gemm_roofline",
                 {"device": "cpu", "sizes": ["32", "64", "128"], "iters": 2}, env=NCCL_LIKE,
                 timeout=120)
    assert run.rc == 0, run.stderr[-2000:]
    r = run.result
    assert r["peak_flops"] == max(row["flops_per_s"] for row in r["table"])
    assert r["ridge_point_flop_per_byte"] == pytest.approx(r["peak_flops"] /
                                                           r["copy_bandwidth_Bps"])
    for row in r["table"]:
        assert row["flops_per_s"] <= r["peak_flops"] and row["fraction_of_bound"] > 0
        assert row["bound_by"] in ("compute", "memory")
        # (small GEMMs run from cache and may beat the DRAM roof: no upper bound there)


def test_mfu_path_runs_on_cpu_with_a_tiny_gpt(tmp_path_factory, tmp_path):
    params = {"device": "cpu", "layers": 2, "hidden": 32, "heads": 4, "seq_len": 16,
              "vocab": 64, "batch_size": 2, "steps": 2, "warmup": 1}
    run = shared(tmp_path_factory, "gpt_mfu", params, env=NCCL_LIKE, timeout=120)
    assert run.rc == 0, run.stderr[-2000:]
    r = run.result
    fpt = cost.flops_per_token("gpt", 2, 32, 16, 64)
    assert r["flops_per_token"] == fpt
    assert r["achieved_flops"] == pytest.approx(r["tokens_per_s"] * fpt)
    assert r["mfu"] == pytest.approx(r["achieved_flops"] / r["peak_flops"])
    assert 0 < r["mfu"] < 1.5
    assert r["peak_source"].startswith("measured")
    given = launch("gpt_mfu", {**params, "peak_tflops": 989.0}, tmp_path / "given", timeout=120)
    assert given.result["peak_flops"] == 989e12 and given.result["peak_source"] == "given"
    table = subprocess.run([sys.executable, "-m", "jobs.lab", "table", str(run.out)],
                           cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert table.returncode == 0 and "MFU" in table.stdout


@pytest.mark.parametrize("gpus,sets", [(1, 8), (2, 11), (4, 12), (8, 12)])
def test_gpu_check_script_parses_and_its_parameters_validate(gpus, sets, tmp_path):
    script = ROOT / "jobs" / "lab" / "gpu_check.sh"
    subprocess.run(["bash", "-n", str(script)], check=True, timeout=30)
    env = {**os.environ, "PYTHON": sys.executable, "GPU_CHECK_GPUS": str(gpus),
           "GPU_CHECK_DRY_RUN": "1"}
    proc = subprocess.run(["bash", str(script), str(tmp_path)], env=env, capture_output=True,
                          text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert f"dry run, W={gpus}, {sets} parameter sets valid=1" in proc.stdout
    resolved = {p.name.split(".")[0]: json.loads(p.read_text())
                for p in tmp_path.glob("*.params.json")}
    assert len(resolved) == sets
    for name, params in resolved.items():
        assert params["device"] == "cuda"
        if name not in ("roofline", "mfu"):  # every GPU is a rank: no cap at 4
            assert params["world_size"] == gpus
        if "strategies" in params:  # the gate, at bf16 tolerances
            assert params["gate_tolerance"] == "bfloat16"
    mfu = resolved["mfu"]  # GPT-2 124M: tied head, bf16
    assert mfu["tie_head"] and mfu["dtype"] == "bfloat16"
    P = cost.param_count("gpt", mfu["layers"], mfu["hidden"], mfu["seq_len"], mfu["vocab"],
                              tied=True)
    assert 124e6 < P < 125e6


def test_cli_lists_the_catalogue_as_json():
    proc = subprocess.run([sys.executable, "-m", "jobs.lab", "list", "--json"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0
    names = [e["name"] for e in json.loads(proc.stdout)]
    assert "pipeline" in names and "zero" in names
    bad = subprocess.run([sys.executable, "-m", "jobs.lab", "check", "tensor_parallel",
                          "--params", '{"world_size": 3}'], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode == 2 and "heads" in bad.stderr
