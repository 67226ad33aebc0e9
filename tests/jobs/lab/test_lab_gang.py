"""A run that spans hosts, at the lab's level: two launchers on loopback, one per "node",
as the runner agents start them (tests/app/journal/test_gang_runs.py runs them through the journal).
The test plays the runner: it holds node 0's rendezvous port as a listening socket and
passes it down, so node 0's store can only work on that socket (its own bind would find
the port taken). Every process is found by PID and ended in teardown."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from lab_helpers import PLUGINS, ROOT, TINY

from jobs.lab.launcher.launch import RDZV_FD_ENV
from tests.journal_harness import alive, processes_of, wait_until

SLEEPING = {**TINY, "world_size": 2, "steps": 1, "warmup": 0, "strategies": ["dp_naive"]}
TIMEOUT_EXIT = 5  # base/contract.py: "timeout"


@pytest.fixture
def reserved():
    """Node 0's rendezvous port, bound and listening, as a runner holds it."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    yield sock
    sock.close()


@pytest.fixture
def started():
    procs: list[tuple[subprocess.Popen, Path]] = []
    yield procs
    for proc, out in procs:  # whatever is left: the launcher's group, then the run's PIDs
        for pid in [proc.pid, *processes_of(out)]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait(timeout=30)


def node(started, tmp_path, rank, endpoint, fd=None, env=None, params=SLEEPING):
    out = tmp_path / f"node{rank}"
    gang = {"nodes": 2, "node_rank": rank, "endpoint": endpoint, "rdzv_id": "gang-test"}
    extra = {RDZV_FD_ENV: str(fd)} if fd is not None else {}
    proc = subprocess.Popen(
        [sys.executable, "-m", "jobs.lab", "run", "data_parallel", "--params",
         json.dumps(params), "--out", str(out), "--gang", json.dumps(gang)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        pass_fds=(fd,) if fd is not None else (), start_new_session=True,
        env={**os.environ, "PYTHONWARNINGS": "ignore",
             "COMMONPLACE_LAB_PLUGIN": str(PLUGINS / "sleep_all.py"), **extra, **(env or {})})
    started.append((proc, out))
    return proc, out


def ranks_of(out):
    """The live children of the node's torchrun agent (pids.json names it)."""
    try:
        agent = json.loads((out / "pids.json").read_text())["torchrun_pgid"]
    except (OSError, ValueError):
        return []
    return [pid for pid in processes_of(out)
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1] == str(agent)]


def test_a_killed_launcher_leaves_no_process_of_its_node_alive(started, tmp_path, reserved):
    endpoint = f"127.0.0.1:{reserved.getsockname()[1]}"
    nodes = [node(started, tmp_path, 0, endpoint, fd=reserved.fileno()),
             node(started, tmp_path, 1, endpoint)]
    for rank, (_, out) in enumerate(nodes):  # past the rendezvous: torchrun forked the rank
        wait_until(f"node {rank}'s rank to start", lambda o=out: ranks_of(o), 120)
    for proc, out in reversed(nodes):  # node 1, then node 0 (the rendezvous' host)
        pids = processes_of(out)  # the launcher, torchrun's agent, its rank
        assert proc.pid in pids and set(ranks_of(out)) < set(pids), pids
        os.kill(proc.pid, signal.SIGKILL)
        wait_until("every process of the node to end",
                   lambda p=pids: not any(map(alive, p)), 30)
        assert not processes_of(out)


@pytest.mark.parametrize("missing", [1, 0])
def test_a_node_that_never_starts_fails_the_others_within_the_bound(
        started, tmp_path, reserved, missing):
    """Node 1 missing: node 0's store waits for it. Node 0 missing (its runner holds the
    port, nothing serves it): node 1 is never answered. Either way the node that came
    fails within COMMONPLACE_GANG_JOIN_S and says why."""
    endpoint = f"127.0.0.1:{reserved.getsockname()[1]}"
    present = 1 - missing
    proc, out = node(started, tmp_path, present, endpoint,
                     fd=reserved.fileno() if present == 0 else None,
                     env={"COMMONPLACE_GANG_JOIN_S": "6"})
    t0 = time.monotonic()
    _, stderr = proc.communicate(timeout=180)
    print(f"\n[figure] node {present} alone: failed after {time.monotonic() - t0:.1f} s "
          f"(bound 6 s, plus starting Python and torch)")
    assert proc.returncode == TIMEOUT_EXIT, stderr[-2000:]
    assert "the gang did not assemble: not all 2 nodes reached the rendezvous" in stderr
    result = json.loads((out / "result.json").read_text())
    assert result["reason"]["code"] == "timeout"
    assert not processes_of(out)
