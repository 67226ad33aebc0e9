"""Launch one experiment under torchrun and classify how it ended.

Exit codes (also ``reason.code`` in result.json):
    0  succeeded
    2  invalid_params   - refused before anything was launched
    3  correctness      - a strategy did not match the single-device reference
    4  rank_failed      - a rank crashed or a collective timed out
    5  timeout          - the outer watchdog killed the run
    6  unsupported      - e.g. more ranks than GPUs on nccl
    7  cancelled        - SIGTERM/SIGINT from the caller

torchrun runs in its own session (process group): the watchdog, a cancel and a
failure all end it with killpg, SIGTERM then SIGKILL, so no rank outlives the run.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from typing import Any, TextIO

from jobs.lab import registry

EXIT = {"succeeded": 0, "invalid_params": 2, "correctness": 3, "rank_failed": 4,
        "timeout": 5, "unsupported": 6, "cancelled": 7}
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_TIMEOUT_S = 900.0
KILL_GRACE_S = 5.0


def _write(path: str, obj: dict) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as fh:
        json.dump(obj, fh, indent=1)
    os.replace(tmp, path)


def failure_result(experiment: str, params: Any, code: str, message: str) -> dict:
    return {"schema_version": 1, "experiment": experiment, "params": params,
            "status": "failed", "reason": {"code": code, "message": message}}


def command(experiment: str, params: dict, out: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone",
            f"--nproc-per-node={params['world_size']}", "--monitor-interval=0.2",
            "-m", "jobs.lab.worker", experiment, "--params", json.dumps(params), "--out", out]


def environment(params: dict) -> dict[str, str]:
    env = dict(os.environ)
    env.update(MASTER_ADDR="127.0.0.1", GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1",
               PYTHONUNBUFFERED="1")
    # torch warns at import when numpy is absent; the lab does not use numpy
    env.setdefault("PYTHONWARNINGS", "ignore:Failed to initialize NumPy")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (REPO_ROOT, env.get("PYTHONPATH")) if p)
    if params.get("device") == "cpu":
        # fully_shard on a gloo group moves modules to CUDA when it sees a GPU (#132471)
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def _kill_group(proc: subprocess.Popen) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=KILL_GRACE_S)
            return
        except subprocess.TimeoutExpired:
            continue


def _reason_from_output(lines: deque[str], rc: int) -> str:
    """One line for a crashed run: the root-cause rank's own exception if torchrun
    named one, else the last exception any rank printed, else the exit code."""
    text = [ln.strip() for ln in lines]
    root = None
    for i, ln in enumerate(text):
        if ln.startswith("Root Cause"):
            for nxt in text[i:i + 6]:
                m = re.match(r"rank\s*:\s*(\d+)", nxt)
                if m:
                    root = m.group(1)
                    break
    errors = [m for m in (re.match(r"\[rank(\d+)\]: (\w+(Error|Exception|Timeout)\b.*)", ln)
                          for ln in text) if m and m.group(2).split(":", 1)[-1].strip()]
    mine = [m for m in errors if m.group(1) == root] or errors
    if mine:
        return f"rank {mine[-1].group(1)} failed: {mine[-1].group(2)[:300]}"
    for ln in reversed(text):
        if "exitcode" in ln or "Signal" in ln:
            return f"rank failure (torchrun exit {rc}): {ln[:300]}"
    return f"rank failure: torchrun exited with {rc}"


def run(experiment: str, raw_params: Any, out: str, timeout_s: float = DEFAULT_TIMEOUT_S,
        stdout: TextIO = sys.stdout, stderr: TextIO = sys.stderr) -> int:
    os.makedirs(out, exist_ok=True)
    result_path = os.path.join(out, "result.json")
    for stale in ["result.json"] + [f for f in os.listdir(out) if f.startswith("done.rank")]:
        if os.path.exists(os.path.join(out, stale)):
            os.remove(os.path.join(out, stale))
    try:
        params = registry.validate(experiment, raw_params)
    except registry.ParamError as exc:
        _write(result_path, {**failure_result(experiment, raw_params, "invalid_params",
                                              f"{exc.param}: {exc.message}"),
                             "param": exc.param})
        print(f"error: invalid parameter {exc.param}: {exc.message}", file=stderr, flush=True)
        return EXIT["invalid_params"]

    cmd = command(experiment, params, out)
    tail: deque[str] = deque(maxlen=400)
    log = open(os.path.join(out, "output.log"), "w")
    started = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env=environment(params),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            bufsize=1, start_new_session=True)
    # who to kill if this launcher itself dies: torchrun leads its own process group
    _write(os.path.join(out, "pids.json"), {"launcher": os.getpid(), "torchrun_pgid": proc.pid})
    state = {"timed_out": False, "cancelled": False}

    def watchdog() -> None:
        if _wait(proc, timeout_s):
            return
        state["timed_out"] = True
        _kill_group(proc)

    def on_signal(signum: int, _frame: Any) -> None:
        state["cancelled"] = True
        _kill_group(proc)

    previous = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, on_signal)
    threading.Thread(target=watchdog, daemon=True).start()
    try:
        for line in proc.stdout:
            stdout.write(line)
            stdout.flush()
            log.write(line)
            tail.append(line)
        rc = proc.wait()
    finally:
        if proc.poll() is None:
            _kill_group(proc)
        log.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    elapsed = time.monotonic() - started
    merge_events(out, params["world_size"])

    result = None
    if os.path.exists(result_path):
        with open(result_path) as fh:
            result = json.load(fh)
    if state["cancelled"]:
        code, message = "cancelled", "cancelled by signal"
    elif state["timed_out"]:
        code, message = "timeout", f"no result after {timeout_s:.0f} s; killed the run"
    elif result is not None and (rc == 0 or _all_done(out, params["world_size"])):
        # (a rank that dies after writing its done marker died in teardown, not in the run)
        code = "succeeded" if result["status"] == "succeeded" else result["reason"]["code"]
        message = result["reason"]["message"] if result.get("reason") else ""
    else:
        code, message = "rank_failed", _reason_from_output(tail, rc)
    if code in ("cancelled", "timeout", "rank_failed"):
        partial = result or {}
        _write(result_path, {**partial, **failure_result(experiment, params, code, message),
                             "duration_s": elapsed})
    if code == "succeeded":
        print(f"result status=succeeded path={result_path}", file=stdout, flush=True)
    else:
        print(f"error: {code}: {message}", file=stderr, flush=True)
    return EXIT[code]


def _all_done(out: str, world: int) -> bool:
    return all(os.path.exists(os.path.join(out, f"done.rank{r}")) for r in range(world))


def _wait(proc: subprocess.Popen, timeout_s: float) -> bool:
    try:
        proc.wait(timeout=timeout_s)
        return True
    except subprocess.TimeoutExpired:
        return False


def merge_events(out: str, world: int) -> None:
    """events.rank<r>.jsonl from every rank -> one events.jsonl sorted by start time."""
    events = []
    for r in range(world):
        path = os.path.join(out, f"events.rank{r}.jsonl")
        if os.path.exists(path):
            with open(path) as fh:
                events.extend(json.loads(line) for line in fh if line.strip())
    events.sort(key=lambda e: (e["t0"], e["rank"]))
    with open(os.path.join(out, "events.jsonl"), "w") as fh:
        for ev in events:
            fh.write(json.dumps(ev) + "\n")
