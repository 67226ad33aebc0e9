"""Run the real launcher in a subprocess, and always clean up what it started."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tests.real_runs import kill_recorded_group, launch_once

ROOT = Path(__file__).resolve().parents[3]
PLUGINS = Path(__file__).resolve().parent / "plugins"

# tiny and quick: every distributed test uses these unless it says otherwise
TINY = {"hidden": 32, "heads": 4, "layers": 2, "seq_len": 16, "vocab": 64, "batch_size": 8,
        "steps": 2, "warmup": 1, "device": "cpu"}
# the default process group restricted the way nccl's is (test_lab_matrix.py says how)
NCCL_LIKE = {"COMMONPLACE_LAB_PG_BACKEND": "cuda:gloo"}


@dataclass
class Run:
    rc: int
    stdout: str
    stderr: str
    out: Path
    seconds: float

    @property
    def result(self) -> dict:
        return json.loads((self.out / "result.json").read_text())

    def strategy(self, name: str) -> dict:
        return next(s for s in self.result["strategies"] if s["strategy"] == name)


def start(experiment: str, params: dict, out: Path, env: dict | None = None,
          extra: tuple[str, ...] = ()) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "jobs.lab", "run", experiment, "--params", json.dumps(params),
           "--out", str(out), *extra]
    full_env = {**os.environ, "PYTHONWARNINGS": "ignore", **(env or {})}
    return subprocess.Popen(cmd, cwd=ROOT, env=full_env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def cleanup(proc: subprocess.Popen, out: Path) -> None:
    """End the launcher (SIGTERM makes it kill its torchrun group), then make sure
    that group - recorded by the launcher in pids.json - is gone too."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=15)
    kill_recorded_group(out)


def launch(experiment: str, params: dict, out: Path, timeout: float = 240,
           env: dict | None = None, extra: tuple[str, ...] = ()) -> Run:
    t0 = time.monotonic()
    proc = start(experiment, params, out, env, extra)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    finally:
        cleanup(proc, out)
    return Run(proc.returncode, stdout, stderr, out, time.monotonic() - t0)


def shared(tmp_path_factory, experiment: str, params: dict, env: dict | None = None,
           timeout: float = 240) -> Run:
    """`launch`, once a session per experiment, resolved parameters and environment
    (tests/real_runs.py's launch_once): a test that needs a run another test makes - the
    matrix's, the views' - reads that one. Each test that shares says so, and why the
    shared run is the one it needs."""
    out, run = launch_once(tmp_path_factory, experiment, params, env, timeout)
    return Run(run["rc"], run["stdout"], run["stderr"], out, run["seconds"])
