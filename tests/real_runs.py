"""Real finished lab runs for the views' tests: the real launcher on CPU with gloo, run once
per parameter set and shared by every test and every pytest-xdist worker (a file lock in the
session's common temporary directory), then stored in a test's database as the runner would
store them: the result on the run, events.jsonl as an artifact.

    out = lab_output(tmp_path_factory, "pipeline", world_size=2)
    run_id = store_run(app, "pipeline", out)
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import subprocess
import sys
from pathlib import Path

from app.journal import run_files, runs
from jobs.lab.contract import EVENTS_FILE

ROOT = Path(__file__).resolve().parents[1]

# Small enough for seconds on two cores, big enough that every view has something to draw.
SMALL = {"hidden": 32, "heads": 4, "layers": 4, "seq_len": 16, "vocab": 64, "batch_size": 8,
         "steps": 3, "warmup": 1, "device": "cpu"}
PARAMS = {
    "pipeline": {**SMALL, "world_size": 2, "micro_batches": 4},
    "zero": {**SMALL, "world_size": 2},
    "data_parallel": {**SMALL, "world_size": 2},
    "tensor_parallel": {**SMALL, "world_size": 2},
    "collectives": {"world_size": 2, "device": "cpu", "max_bytes": 1 << 16, "iters": 3},
    "gemm_roofline": {"device": "cpu", "sizes": ["64", "128"], "iters": 2},
    "gpt_mfu": {"device": "cpu", "hidden": 32, "heads": 4, "layers": 2, "seq_len": 16,
                "vocab": 64, "steps": 3, "warmup": 1},
}


def lab_output(tmp_path_factory, experiment: str, **overrides) -> Path:
    """The output directory of a real `python -m jobs.lab run` (result.json, events.jsonl)."""
    params = {**PARAMS[experiment], **overrides}
    key = hashlib.sha256(json.dumps([experiment, params], sort_keys=True).encode()).hexdigest()
    shared = tmp_path_factory.getbasetemp()
    if shared.name.startswith("popen-gw"):  # under xdist: the workers' common parent
        shared = shared.parent
    out = shared / "real-runs" / f"{experiment}-{key[:12]}"
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / f"{out.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (out / "result.json").exists():
            proc = subprocess.run(
                [sys.executable, "-m", "jobs.lab", "run", experiment, "--params",
                 json.dumps(params), "--out", str(out), "--timeout", "240"],
                cwd=ROOT, capture_output=True, text=True, timeout=300)
            assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
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
