"""Launch one experiment under torchrun, and classify how it ended.

This is the one place a run's failure is classified: the ranks report what they know
(a correctness failure, an unsupported machine) in result.json, and everything else -
a crash, running out of memory, a collective that timed out, the watchdog, a cancel -
is read here from how torchrun ended and the tail of its output. The reason goes into
result.json and the exit code says it too (the table is base/contract.py); the
runner agent only forwards it.

torchrun runs in its own session (process group): the watchdog, a cancel and a
failure all end it with killpg, SIGTERM then SIGKILL, so no rank outlives the run. If
this launcher dies without doing so (SIGKILL), the kernel kills torchrun (a parent-death
signal), and each rank dies with its parent in turn (worker.die_with_parent).

A run that spans hosts (`gang`: nodes, node_rank, endpoint, rdzv_id, as the runner's
lease gives them) runs world_size / nodes ranks here, torchrun --nnodes --node-rank with
the static rendezvous at node 0's endpoint (c10d would ignore --node-rank and number the
hosts by address, so rank 0 and its result could land anywhere). Every line is tagged
with its node and rank ("[node1 rank3]:"), so the nodes' logs merge into one. Rank 0,
on node 0, writes the result; another node succeeds when its own ranks finished. Every
node waits for the others at the rendezvous for GANG_JOIN_S (COMMONPLACE_GANG_JOIN_S)
at most, then fails saying so. Node 0's rendezvous listens on a socket the runner
reserved when it offered the port and still holds (its descriptor in RDZV_FD_ENV), so
no other process can take the port in between (elastic.py).
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Iterable
from typing import Any, TextIO

from base import contract
from base.durable import write_atomic, write_json
from jobs.lab.catalogue import own, registry

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
DEFAULT_TIMEOUT_S = 900.0
KILL_GRACE_S = 5.0
OUT_OF_MEMORY_RE = re.compile(r"out of memory|OutOfMemoryError", re.I)
NODE_TAG_RE = re.compile(r"^\[node\d+(?: rank\d+)?\]:")
LOOPBACK = ("127.", "localhost", "[::1]")
TIMED_OUT_RE = re.compile(r"\btimed? ?out\b|\btimeout\b", re.I)
# a node's TCPStore gave up on the rendezvous: node 0 waiting for the others to connect,
# another node for node 0's store to accept it
RENDEZVOUS_RE = re.compile(r"waiting for clients|trying to connect to|client socket has "
                           r"timed out|DistNetworkError|DistStoreError", re.I)
RANK_LINE_RE = re.compile(r"^\[(?:node\d+ )?rank\d+\]:")  # a rank's: past the rendezvous
GANG_JOIN_S = float(os.environ.get("COMMONPLACE_GANG_JOIN_S", "120"))
JOIN_GRACE_S = 10.0  # the launcher's own deadline, past torchrun's: a node never answered
RDZV_FD_ENV = "COMMONPLACE_RDZV_FD"  # node 0: the listening socket the runner reserved


def failure_result(experiment: str, params: Any, code: str, message: str) -> dict:
    return {"schema_version": contract.RESULT_SCHEMA_VERSION, "experiment": experiment,
            "params": params, "status": "failed",
            "reason": {"code": code, "message": message}}


def check_gang(gang: Any, params: dict) -> dict | None:
    """The lease's gang (None for a run on one host), or ValueError saying what is wrong."""
    if gang is None:
        return None
    keys = {"nodes", "node_rank", "endpoint", "rdzv_id"}
    if not isinstance(gang, dict) or set(gang) != keys:
        raise ValueError(f"gang is an object of {', '.join(sorted(keys))}")
    nodes, rank, endpoint = gang["nodes"], gang["node_rank"], gang["endpoint"]
    if not (isinstance(nodes, int) and isinstance(rank, int) and 0 <= rank < nodes
            and params["world_size"] % nodes == 0):
        raise ValueError("gang: node_rank from 0 to nodes - 1; nodes divides world_size")
    if not (isinstance(endpoint, str) and re.fullmatch(r"\S+:\d{1,5}", endpoint)):
        raise ValueError("gang.endpoint is host:port")
    return gang


def command(experiment: str, params: dict, out: str, gang: dict | None = None) -> list[str]:
    if gang is None:
        where = ["--standalone", f"--nproc-per-node={params['world_size']}"]
    else:
        where = [f"--nnodes={gang['nodes']}", f"--node-rank={gang['node_rank']}",
                 "--rdzv-backend=static", f"--rdzv-endpoint={gang['endpoint']}",
                 f"--rdzv-id={gang['rdzv_id']}", f"--rdzv-conf=timeout={GANG_JOIN_S:.0f}",
                 f"--nproc-per-node={params['world_size'] // gang['nodes']}",
                 "--tee=3", f"--log-dir={os.path.join(out, 'torchrun')}"]
    return [sys.executable, "-m", "jobs.lab.launcher.elastic", *where, "--monitor-interval=0.2",
            "-m", "jobs.lab.launcher.worker", experiment, "--params", json.dumps(params),
            "--out", out]


def environment(params: dict, gang: dict | None = None,
                rdzv_fd: int | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.pop(RDZV_FD_ENV, None)
    if rdzv_fd is not None:  # the agent listens on it (elastic.py)
        env[RDZV_FD_ENV] = str(rdzv_fd)
    env.update(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    if gang is None or gang["endpoint"].startswith(LOOPBACK):
        env.update(MASTER_ADDR="127.0.0.1", GLOO_SOCKET_IFNAME="lo")
    # across hosts the runner's environment names the interface (GLOO_SOCKET_IFNAME,
    # NCCL_SOCKET_IFNAME: docs/RUNNER.md); torchrun tags each rank's lines
    if gang is not None:
        env["TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"] = f"[node{gang['node_rank']} rank${{rank}}]:"
    # torch warns at import when numpy is absent; the lab does not use numpy
    env.setdefault("PYTHONWARNINGS", "ignore:Failed to initialize NumPy")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (REPO_ROOT, env.get("PYTHONPATH")) if p)
    if params.get("device") == "cpu":
        # fully_shard on a gloo group moves modules to CUDA when it sees a GPU (#132471)
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def reserved_fd(gang: dict | None) -> int | None:
    """Node 0's reserved rendezvous socket, when the runner passed one for this port."""
    raw = os.environ.get(RDZV_FD_ENV, "")
    if gang is None or gang["node_rank"] != 0 or not raw.isdigit():
        return None
    import socket  # (only a gang's node 0 needs it)
    try:
        with socket.socket(fileno=os.dup(int(raw))) as sock:
            port = sock.getsockname()[1]
    except OSError:
        return None
    return int(raw) if str(port) == gang["endpoint"].rsplit(":", 1)[1] else None


def _die_with(launcher: int) -> Any:
    """torchrun's preexec: SIGKILL when this launcher dies (or has died already)."""
    def preexec() -> None:
        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PDEATHSIG
        except (OSError, AttributeError):
            return  # not Linux: the process group is what there is
        if os.getppid() != launcher:
            os._exit(1)
    return preexec


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


def classify_crash(tail: Iterable[str], rc: int) -> tuple[str, str]:
    """(reason code, message) for ranks that ended without finishing. The message is the
    root-cause rank's own exception if torchrun named one, else the last exception any
    rank printed, else torchrun's exit. Out of memory anywhere in the tail wins (whatever
    broke after it broke because of it); a timed-out collective is judged on the
    exception the message names, or on the whole tail when no rank printed one (NCCL's
    watchdog logs its timeout, then aborts)."""
    text = [ln.strip() for ln in tail]
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
    exception = mine[-1].group(2) if mine else ""
    if mine:
        message = f"rank {mine[-1].group(1)} failed: {exception[:300]}"
    else:
        message = next((f"rank failure (torchrun exit {rc}): {ln[:300]}" for ln in reversed(text)
                        if "exitcode" in ln or "Signal" in ln),
                       f"rank failure: torchrun exited with {rc}")
    whole = "\n".join(text)
    if OUT_OF_MEMORY_RE.search(whole):
        return "out_of_memory", message
    if TIMED_OUT_RE.search(exception or whole):
        return "collective_timeout", message
    return "rank_failed", message


def run(experiment: str, raw_params: Any, out: str, timeout_s: float = DEFAULT_TIMEOUT_S,
        stdout: TextIO = sys.stdout, stderr: TextIO = sys.stderr, gang: Any = None) -> int:
    os.makedirs(out, exist_ok=True)
    result_path = os.path.join(out, contract.RESULT_FILE)
    for stale in [contract.RESULT_FILE] + [f for f in os.listdir(out)
                                           if f.startswith(contract.DONE_PREFIX)]:
        if os.path.exists(os.path.join(out, stale)):
            os.remove(os.path.join(out, stale))
    try:
        params = own.validate(experiment, raw_params)  # the lab's, or the owner's own
        gang = check_gang(gang, params)
    except (registry.ParamError, ValueError) as exc:
        param, why = (exc.param, exc.message) if isinstance(exc, registry.ParamError) else (
            "gang", str(exc))
        write_json(result_path, {**failure_result(experiment, raw_params, "invalid_params",
                                                  f"{param}: {why}"), "param": param})
        print(f"error: invalid parameter {param}: {why}", file=stderr, flush=True)
        return contract.EXIT_CODES["invalid_params"]

    # this host's ranks, and the tag of lines that are not a rank's (torchrun's, ours)
    per_node = params["world_size"] // (gang["nodes"] if gang else 1)
    first = gang["node_rank"] * per_node if gang else 0
    ranks = range(first, first + per_node)
    tag = f"[node{gang['node_rank']}]:" if gang else ""
    cmd = command(experiment, params, out, gang)
    tail: deque[str] = deque(maxlen=400)
    log = open(os.path.join(out, contract.OUTPUT_LOG), "w")
    launching = tag + contract.progress_line(0, 0, {"phase": "launching"}) + "\n"
    stdout.write(launching)
    stdout.flush()
    log.write(launching)
    started = time.monotonic()
    fd = reserved_fd(gang)
    proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env=environment(params, gang, fd),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            bufsize=1, start_new_session=True, pass_fds=(fd,) if fd else (),
                            preexec_fn=_die_with(os.getpid()))
    # who to kill if this launcher itself dies: torchrun leads its own process group
    write_json(os.path.join(out, contract.PIDS_FILE), contract.pids_record(os.getpid(), proc.pid))
    state = {"timed_out": False, "cancelled": False, "unassembled": False}
    ready, joined = threading.Event(), threading.Event()

    def watchdog() -> None:
        if _wait(proc, timeout_s):
            return
        state["timed_out"] = True
        _kill_group(proc)

    def gang_watch() -> None:
        """torchrun's store bounds its own wait, but not a connection that a held port
        accepted and nothing answers (node 0's runner up, its launcher not)."""
        ready.wait()
        if not joined.wait(GANG_JOIN_S + JOIN_GRACE_S) and proc.poll() is None:
            state["unassembled"] = True
            _kill_group(proc)

    def on_signal(signum: int, _frame: Any) -> None:
        state["cancelled"] = True
        _kill_group(proc)

    previous = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, on_signal)
    threading.Thread(target=watchdog, daemon=True).start()
    if gang:
        threading.Thread(target=gang_watch, daemon=True).start()
    try:
        for line in proc.stdout:
            if _phase(line) == "starting":  # elastic.py's line just before its rendezvous
                ready.set()
            elif RANK_LINE_RE.match(line):
                joined.set()
            if tag and not NODE_TAG_RE.match(line):
                line = tag + line
            stdout.write(line)
            stdout.flush()
            log.write(line)
            tail.append(NODE_TAG_RE.sub("", line) if tag else line)
        rc = proc.wait()
    finally:
        ready.set()  # (the gang's watch ends with the run)
        if proc.poll() is None:
            _kill_group(proc)
        log.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    elapsed = time.monotonic() - started
    merge_events(out, ranks)

    result = None
    if os.path.exists(result_path):
        with open(result_path) as fh:
            result = json.load(fh)
    decided_here = True  # else the ranks' result.json said how the run ended
    if state["cancelled"]:
        code, message = "cancelled", "cancelled by signal"
    elif state["timed_out"]:
        code, message = "timeout", f"no result after {timeout_s:.0f} s; killed the run"
    elif result is not None and (rc == 0 or _all_done(out, ranks)):
        # (a rank that dies after writing its done marker died in teardown, not in the run)
        decided_here = False
        code = "succeeded" if result["status"] == "succeeded" else result["reason"]["code"]
        message = result["reason"]["message"] if result.get("reason") else ""
    elif first > 0 and (rc == 0 or _all_done(out, ranks)):
        decided_here, code, message = False, "succeeded", ""  # node 0 has the result
    elif gang and not joined.is_set() and (state["unassembled"]
                                           or RENDEZVOUS_RE.search("".join(tail))):
        code, message = "timeout", (
            f"the gang did not assemble: not all {gang['nodes']} nodes reached the "
            f"rendezvous at {gang['endpoint']} within {GANG_JOIN_S:.0f} s (a node that never "
            "started, or cannot reach node 0)")
    else:
        code, message = classify_crash(tail, rc)
    if decided_here:  # the result says so, keeping whatever the ranks wrote
        partial = result or {}
        write_json(result_path, {**partial, **failure_result(experiment, params, code, message),
                                 "duration_s": elapsed})
    if code == "succeeded":
        where = f"path={result_path}" if result is not None else f"node={gang['node_rank']}"
        print(f"{tag}result status=succeeded {where}", file=stdout, flush=True)
    else:
        print(f"{tag}error: {code}: {message}", file=stderr, flush=True)
    return contract.EXIT_CODES[code]


def _phase(line: str) -> str | None:
    progress = contract.parse_progress(line)
    return str(progress[2].get("phase")) if progress else None


def _all_done(out: str, ranks: Iterable[int]) -> bool:
    return all(os.path.exists(os.path.join(out, contract.done_file(r))) for r in ranks)


def _wait(proc: subprocess.Popen, timeout_s: float) -> bool:
    try:
        proc.wait(timeout=timeout_s)
        return True
    except subprocess.TimeoutExpired:
        return False


def merge_events(out: str, ranks: Iterable[int]) -> None:
    """events.rank<r>.jsonl from every rank here -> one events.jsonl sorted by start time."""
    events = []
    for r in ranks:
        path = os.path.join(out, contract.rank_events_file(r))
        if os.path.exists(path):
            with open(path) as fh:
                events.extend(json.loads(line) for line in fh if line.strip())
    events.sort(key=lambda e: (e["t0"], e["rank"]))
    write_atomic(os.path.join(out, contract.EVENTS_FILE),
                 "".join(json.dumps(ev) + "\n" for ev in events))
