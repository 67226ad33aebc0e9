"""Every experiment at world sizes 1, 2 and 4 (where it is defined), small and quick,
with the default process group restricted the way nccl is: its backend string maps only
``cuda`` to gloo, so a CPU tensor sent without naming a group fails - the gate's,
gather's and the probes' bookkeeping as much as the strategies' own traffic. This is
how a GPU host fails ("No backend type associated with device type cpu"), on CPU.
The training experiments run the mixed-precision recipe (bf16 compute, fp32 master
weights, AdamW) at world size 2, the fp32 one elsewhere: every strategy's bytes are
exact and its memory within 10% of the formula in both.

Each case is one shared run (lab_helpers.shared): other tests read the cases whose
parameters are theirs rather than launch the same run again. A few cases carry a
parameter or two more than the rest of their experiment (AT_WORLD) to be that run."""

from __future__ import annotations

import subprocess
import sys

import pytest
from lab_helpers import NCCL_LIKE, ROOT, TINY, shared

from jobs.lab.catalogue import registry
from jobs.lab.strategies.correctness import GATE_STEPS

QUICK = {**TINY, "steps": 1, "warmup": 0}
PARAMS = {
    "data_parallel": QUICK,
    "tensor_parallel": QUICK,
    # several buckets: gloo may hold one bucket's staging a thread switch past its
    # collective, which the formula counts as a bound - a small fraction of many buckets
    "zero": {**QUICK, "bucket_cap_mb": 0.02},
    "pipeline": {**QUICK, "layers": 4, "micro_batches": 4},
    # tp=2, pp=2: DP x TP with dp = 1 at world 2, dp = 2 at world 4 (dp_pp_tp: test_lab_mesh)
    "mesh": {**QUICK, "strategies": ["dp_tp", "torch_dp_tp", "dp_pp"]},
    "collectives": {"device": "cpu", "min_bytes": 1024, "max_bytes": 4096, "iters": 2,
                    "warmup": 1, "measure_overhead": False},
    # test_lab_benchmarks' runs too: its roofline, and its MFU run (it asks for warm-up)
    "gemm_roofline": {"device": "cpu", "sizes": ["32", "64", "128"], "iters": 2},
    "sequence": QUICK,
    "gpt_mfu": {**{k: TINY[k] for k in ("hidden", "heads", "layers", "seq_len", "vocab",
                                        "device")}, "batch_size": 2, "steps": 2, "warmup": 1},
    "recompute": QUICK,
    # 4 experts: E/d = 4, 2, 1 per rank; capacity 2x (a few drops at this size)
    "experts": {**QUICK, "experts": 4},
}
# Cases that are another test's run too: what that test needs besides PARAMS.
AT_WORLD = {
    # test_lab_benchmarks' sweep: 5 sizes, and the counting wrapper's overhead
    ("collectives", 2): {"max_bytes": 16384, "iters": 3, "measure_overhead": True},
    # test_lab_mesh's fp32 torch_dp_pp beside dp_pp
    ("mesh", 4): {"strategies": [*PARAMS["mesh"]["strategies"], "torch_dp_pp"]},
    # test_lab_experts' world 4: each token to 2 experts, capacity 1x
    ("experts", 4): {"top_k": 2, "capacity_factor": 1.0},
}
CASES = [(exp, w) for exp in PARAMS for w in (1, 2, 4)
         if registry.EXPERIMENTS[exp]["min_world_size"] <= w
         and w <= registry.EXPERIMENTS[exp]["params"]["world_size"].get("max", 8)]


def test_the_matrix_covers_every_experiment():
    assert set(PARAMS) == set(registry.EXPERIMENTS)


@pytest.mark.parametrize("experiment,world", CASES)
def test_every_experiment_at_every_world_size_under_nccls_device_restriction(
        experiment, world, tmp_path_factory):
    params = {**PARAMS[experiment], **AT_WORLD.get((experiment, world), {})}
    if registry.EXPERIMENTS[experiment]["params"]["world_size"].get("max") != 1:
        params["world_size"] = world
    mixed = "precision" in registry.EXPERIMENTS[experiment]["params"] and world == 2
    if mixed:
        params["precision"] = "bf16_adamw"
    run = shared(tmp_path_factory, experiment, params, env=NCCL_LIKE)
    assert run.rc == 0, (run.stderr[-3000:], run.stdout[-2000:])
    r = run.result
    assert r["status"] == "succeeded"
    assert r["environment"]["backend"] == "cuda:gloo"
    for s in r.get("strategies", []):
        c = s["correctness"]
        assert c["passed"], (s["strategy"], c["reason"])
        assert c["steps_checked"] == GATE_STEPS and c["coverage_exact"]
        if mixed:  # bf16 rounding: measured <= 0.05 of a tensor's scale; a bug is >= 0.6
            assert c["max_rel_error"] < 0.15 and c["tolerance"] == "bf16_compute"
            assert s["mfu"]["dtype"] == "bfloat16"
        else:
            assert c["max_rel_error"] < 1e-4 and c["tolerance"] == "float32"
        if c["schedule"]:
            assert c["schedule"]["order_ok"]
            assert c["schedule"]["max_in_flight"] == c["schedule"]["bound"]
        assert s["step_time_s"]["median"] > 0 and s["ratios"]["step_time"] > 0
        assert s["mfu"]["peak_name"].startswith("measured")
        assert s["mfu"]["value"] <= 1.0 or not s["mfu"]["valid"]
        # every strategy's bytes, PyTorch's own included (None: nothing sent or predicted)
        assert s["comm"]["all_exact"] in ((True, None) if s["ranks"] == 1 else (True,)), \
            s["comm"]["bytes_vs_predicted"]
        for m in s["memory"]:
            assert 0.9 <= m["peak"]["ratio"] <= 1.1, (s["strategy"], m["rank"], m["peak"])
    if "calibration" in r:
        assert r["calibration"]["n"] == world
        tries = r["calibration"]["peak_samples"]  # a measured peak: the best of its tries
        assert not tries or r["calibration"]["peak_flops"] == max(tries)


RESTRICTED = """
import os, torch, torch.distributed as dist
os.environ.update(RANK="0", WORLD_SIZE="1", COMMONPLACE_LAB_PG_BACKEND="cuda:gloo")
from jobs.lab.components import context as runtime
ctx = runtime.init("cpu")
assert ctx.group is not dist.group.WORLD and ctx.cpu_group is not dist.group.WORLD
try:
    dist.all_reduce(torch.ones(1))
except RuntimeError as exc:
    assert "No backend type associated with device type cpu" in str(exc), exc
else:
    raise AssertionError("a CPU tensor went through the cuda-only default group")
assert ctx.gather({"rank": 0}) == [{"rank": 0}]
assert ctx.sum_cpu(torch.ones(2, dtype=torch.uint8)).tolist() == [1, 1]
ctx.barrier()
print("restricted ok")
"""


def test_the_restriction_is_real_and_the_bookkeeping_avoids_it():
    proc = subprocess.run([sys.executable, "-c", RESTRICTED], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "restricted ok" in proc.stdout
