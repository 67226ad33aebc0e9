"""Real finished lab runs for the views' tests: the real launcher on CPU with gloo, run once
per parameter set and shared by every test and every pytest-xdist worker (a file lock in the
session's common temporary directory), then stored in a test's database as the runner would
store them: the result on the run, events.jsonl as an artifact.

    out = lab_output(tmp_path_factory, "pipeline", world_size=2)
    run_id = store_run(app, "pipeline", out)

`launch_once` is the cache under it, for any parameters and environment: the lab's tests
share runs through it too (tests/jobs/lab/lab_helpers.py's `shared`), with each other and with
the runs here - every run costs each of its ranks seconds of CPU importing torch.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from app.journal import run_files, runs
from base.contract import EVENTS_FILE
from jobs.lab.catalogue import own

ROOT = Path(__file__).resolve().parents[1]

# Small enough for seconds on two cores, big enough that every view has something to draw.
SMALL = {"hidden": 32, "heads": 4, "layers": 4, "seq_len": 16, "vocab": 64, "batch_size": 8,
         "steps": 3, "warmup": 1, "device": "cpu"}
PARAMS = {
    "pipeline": {**SMALL, "world_size": 2, "micro_batches": 4},
    "zero": {**SMALL, "world_size": 2},
    # two micro-batches and small buckets: test_lab_runs.py reads this run too (no_sync,
    # several buckets)
    "data_parallel": {**SMALL, "world_size": 2, "micro_batches": 2, "bucket_cap_mb": 0.01},
    "tensor_parallel": {**SMALL, "world_size": 2},
    "collectives": {"world_size": 2, "device": "cpu", "max_bytes": 1 << 16, "iters": 3},
    "gemm_roofline": {"device": "cpu", "sizes": ["64", "128"], "iters": 2},
    "gpt_mfu": {"device": "cpu", "hidden": 32, "heads": 4, "layers": 2, "seq_len": 16,
                "vocab": 64, "steps": 3, "warmup": 1},
}


def launch_once(tmp_path_factory, experiment: str, params: dict, env: dict | None = None,
                timeout: float = 240) -> tuple[Path, dict]:
    """One real `python -m jobs.lab run` per experiment, resolved parameters (the defaults
    filled in, as the launcher fills them) and environment in the whole session, started by
    whichever test of whichever xdist worker asks first; the others wait on its lock and
    read the same run. Returns its output directory (result.json, events.jsonl) and
    {"rc", "stdout", "stderr", "seconds"}. A run that failed is not run again: every test
    sharing it sees the failure."""
    # (an own experiment's declaration is in the folder the environment names)
    resolved = own.validate(experiment, params, (env or {}).get(own.FOLDER_ENV))
    key = hashlib.sha256(json.dumps([experiment, resolved, env or {}], sort_keys=True)
                         .encode()).hexdigest()
    shared = tmp_path_factory.getbasetemp()
    if shared.name.startswith("popen-gw"):  # under xdist: the workers' common parent
        shared = shared.parent
    out = shared / "real-runs" / f"{experiment}-{key[:12]}"
    record = out.parent / f"{out.name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / f"{out.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not record.exists():
            t0 = time.monotonic()
            proc = subprocess.Popen(
                [sys.executable, "-m", "jobs.lab", "run", experiment, "--params",
                 json.dumps(params), "--out", str(out), "--timeout", str(timeout)],
                cwd=ROOT, env={**os.environ, "PYTHONWARNINGS": "ignore", **(env or {})},
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                start_new_session=True)
            try:
                stdout, stderr = proc.communicate(timeout=timeout + 60)
            finally:  # the launcher's own watchdog failed: end it and its torchrun group
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                    kill_recorded_group(out)
            record.write_text(json.dumps({"rc": proc.returncode, "stdout": stdout,
                                          "stderr": stderr,
                                          "seconds": time.monotonic() - t0}))
    return out, json.loads(record.read_text())


def kill_recorded_group(out: Path) -> None:
    """The torchrun process group the launcher recorded in out/pids.json, if it lives."""
    try:
        os.killpg(json.loads((out / "pids.json").read_text())["torchrun_pgid"],
                  signal.SIGKILL)
    except (OSError, ValueError, KeyError):
        pass


def lab_output(tmp_path_factory, experiment: str, **overrides) -> Path:
    """The output directory of a real `python -m jobs.lab run` (result.json, events.jsonl)."""
    out, run = launch_once(tmp_path_factory, experiment, {**PARAMS[experiment], **overrides})
    assert run["rc"] == 0, run["stdout"][-4000:] + run["stderr"][-4000:]
    return out


def store_run(app, experiment: str, out: Path) -> int:
    """A SUCCEEDED run holding `out`'s result, with its events as the runner uploads them."""
    db = app.extensions["db"]
    result = json.loads((out / "result.json").read_text())
    with db.write() as session:
        run = runs.create(session, experiment, result["params"], actor="test")
        session.flush()
        runs.transition(session, run, runs.LEASED, actor="runner:test")
        runs.transition(session, run, runs.RUNNING, actor="runner:test")
        runs.merge_environment(run, result.get("environment") or {})
        runs.store_result(session, run, result)
        events = out / EVENTS_FILE
        if events.exists() and events.stat().st_size:
            run_files.store_artifact(app.config["DATA_DIR"], session, run, EVENTS_FILE,
                                     events.read_bytes())
        runs.transition(session, run, runs.SUCCEEDED, actor="runner:test")
        return run.id
