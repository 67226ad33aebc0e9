"""Failures end fast and say why: a broken strategy, bad parameters, a killed rank,
a hung rank, a run past its deadline, a device that is not there."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest
from lab_helpers import PLUGINS, TINY, cleanup, launch, start

from jobs.lab.launcher.launch import classify_crash

DP = {**TINY, "world_size": 2, "strategies": ["dp_naive", "ddp"]}


def test_missing_all_reduce_is_caught_by_the_gate(tmp_path):
    run = launch("data_parallel", DP, tmp_path,
                 env={"COMMONPLACE_LAB_PLUGIN": str(PLUGINS / "broken_dp.py")})
    assert run.rc == 3, run.stderr[-2000:]
    r = run.result
    assert r["status"] == "failed" and r["reason"]["code"] == "correctness"
    assert "dp_naive" in r["reason"]["message"]
    assert "grad:blocks.0.mlp.fc.weight" in r["reason"]["message"]
    broken = run.strategy("dp_naive")
    assert not broken["correctness"]["passed"]
    assert broken["correctness"]["max_grad_abs_error"] > 1e-5
    assert "step_time_s" not in broken  # not timed
    assert run.strategy("ddp")["correctness"]["passed"]  # the others still are
    assert "error: correctness" in run.stderr


def test_invalid_params_are_refused_before_launch(tmp_path):
    run = launch("pipeline", {"world_size": 4, "micro_batches": 2, "batch_size": 8,
                              "strategies": ["1f1b"]}, tmp_path, timeout=60)
    assert run.rc == 2
    assert "micro_batches" in run.stderr
    assert run.result["reason"]["code"] == "invalid_params"
    assert run.result["param"] == "micro_batches"
    assert not (tmp_path / "pids.json").exists()  # nothing was launched


def test_bad_json_is_invalid_params(tmp_path):
    import subprocess
    import sys

    from lab_helpers import ROOT

    proc = subprocess.run([sys.executable, "-m", "jobs.lab", "run", "zero", "--params", "{",
                           "--out", str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2 and "params" in proc.stderr


def test_killed_rank_ends_the_run_within_seconds(tmp_path):
    params = {**DP, "steps": 1000, "strategies": ["dp_naive"]}
    proc = start("data_parallel", params, tmp_path)
    try:
        pid = None
        deadline = time.monotonic() + 120
        for line in proc.stdout:
            m = line.startswith("worker rank=1 ") and line.split()[2]
            if m:
                pid = int(m.split("=")[1])
            if line.startswith("progress ") and "phase=timed" in line and pid:
                break
            assert time.monotonic() < deadline, "no timed step within 120 s"
        assert pid
        os.kill(pid, signal.SIGKILL)  # a worker this test's launcher started
        killed = time.monotonic()
        proc.stdout.read()
        rc = proc.wait(timeout=60)
        elapsed = time.monotonic() - killed
    finally:
        cleanup(proc, tmp_path)
    assert rc == 4
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["status"] == "failed" and result["reason"]["code"] == "rank_failed"
    assert elapsed < 30, elapsed


def test_hung_rank_times_out_instead_of_waiting(tmp_path):
    run = launch("data_parallel", {**DP, "strategies": ["dp_naive"]}, tmp_path, timeout=120,
                 env={"COMMONPLACE_LAB_PLUGIN": str(PLUGINS / "hang_rank1.py"),
                      "COMMONPLACE_LAB_PG_TIMEOUT": "5"})
    assert run.rc == 4
    assert run.result["reason"]["code"] == "collective_timeout"
    assert "Timed out" in run.result["reason"]["message"]
    assert run.seconds < 90


def test_watchdog_kills_a_run_past_its_deadline(tmp_path):
    run = launch("data_parallel", {**DP, "strategies": ["dp_naive"]}, tmp_path, timeout=120,
                 env={"COMMONPLACE_LAB_PLUGIN": str(PLUGINS / "sleep_all.py")},
                 extra=("--timeout", "15"))
    assert run.rc == 5
    assert run.result["reason"]["code"] == "timeout"
    assert run.seconds < 60


def test_cuda_requested_without_gpu_is_unsupported(tmp_path):
    import pytest
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible here; the refusal is exercised on CPU machines")
    run = launch("data_parallel", {**DP, "device": "cuda"}, tmp_path, timeout=120)
    assert run.rc == 6
    assert run.result["reason"]["code"] == "unsupported"
    assert "device=cuda" in run.result["reason"]["message"]


GLOO_TIMEOUT = ("[rank0]: RuntimeError: [/gloo/transport/tcp/unbound_buffer.cc:78] Timed out "
                "waiting 5000ms for recv operation to complete")
TORCHRUN_ROOT_CAUSE = """Root Cause (first observed failure):
[0]:
  time      : 2026-11-30_22:42:39
  host      : box
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 4242)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 4242"""


@pytest.mark.parametrize("rc, tail, code, message", [
    (4, "torch.OutOfMemoryError: CUDA out of memory", "out_of_memory", None),
    (4, "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
        "[rank0]: RuntimeError: Connection closed by peer", "out_of_memory", None),
    (4, "rank 1: Timed out waiting 60s for all_reduce", "collective_timeout", None),
    (4, "[rank1]: RuntimeError: Timed out waiting 60s for all_reduce", "collective_timeout",
     "rank 1 failed: RuntimeError: Timed out waiting 60s for all_reduce"),
    (4, GLOO_TIMEOUT, "collective_timeout", "rank 0 failed: " + GLOO_TIMEOUT[len("[rank0]: "):]),
    (4, "[rank0]:[E1130 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=3, OpType=ALLREDUCE) ran for 60001 milliseconds",
     "collective_timeout", None),
    (4, "[rank1]: ValueError: bad shape\n[rank0]: RuntimeError: Connection closed by peer\n"
        + TORCHRUN_ROOT_CAUSE, "rank_failed", "rank 1 failed: ValueError: bad shape"),
    (4, TORCHRUN_ROOT_CAUSE, "rank_failed",
     "rank failure (torchrun exit 4): traceback : Signal 9 (SIGKILL) received by PID 4242"),
    (1, "", "rank_failed", "rank failure: torchrun exited with 1"),
])
def test_the_launcher_classifies_a_crash_from_its_output(rc, tail, code, message):
    got_code, got_message = classify_crash(tail.splitlines(keepends=True), rc)
    assert got_code == code
    if message is not None:
        assert got_message == message
