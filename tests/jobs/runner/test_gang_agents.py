"""Runs that span hosts, for real: two runner agents ("hosts" on loopback, 2 CPU ranks
each, world 4) under a real `commonplace web` and scheduler: one run that succeeds with one
merged log and one result, and one whose node 0 is killed with -9 mid-run. (The gang lease
itself, through the app: tests/app/journal/test_gang_runs.py.)

Every process these tests start is ended by PID (and process group) in teardown, and every
wait has a deadline.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from tests.client_helpers import Terminal
from tests.journal_harness import (
    REAPER,
    TTL,
    Journal,
    alive,
    api,
    processes_of,
    wait_until,
)

WORLD4 = {"world_size": 4, "device": "cpu"}
GANG_WAIT = 4
COLLECTIVES = {**WORLD4, "ops": ["all_reduce", "broadcast"], "max_bytes": 4096, "iters": 2}
SLEEPING = {**WORLD4, "hidden": 32, "heads": 4, "layers": 2, "seq_len": 16, "vocab": 64,
            "batch_size": 8, "steps": 1, "warmup": 0, "strategies": ["dp_naive"]}


@pytest.fixture
def journal(data_dir):
    journal = Journal(data_dir)
    journal.env["COMMONPLACE_GANG_WAIT"] = str(GANG_WAIT)
    try:
        journal.start()
        yield journal
    finally:
        journal.stop()  # every process it started, by PID


def create(journal, experiment, params, nodes=2) -> int:
    status, body = api(journal.base, "/api/v1/runs", {"experiment": experiment,
                                                      "params": params, "nodes": nodes})
    assert status == 201, body
    return body["id"]


def out_dirs(journal, run) -> dict[str, object]:
    """Each node's lab folder, by runner name."""
    return {n["runner"]: next((journal.data_dir / f"runner-{n['runner']}").glob(
        f"run-{run['id']}-epoch-*/lab")) for n in run["gang"]}


def test_two_runners_run_one_world_4_run_with_one_log_and_one_result(journal, tmp_path):
    journal.runner("east")
    cpl = Terminal(tmp_path / "home", journal.base)  # the terminal client asks for 2 nodes
    asked = cpl("run", "collectives", *[a for k, v in COLLECTIVES.items() for a in (
        "-p", f"{k}={','.join(v) if isinstance(v, list) else v}")], "--nodes", "2")
    assert asked.rc == 0, asked.err
    run_id = int(asked.out.splitlines()[0])
    assert journal.run(run_id)["nodes"] == 2
    wait_until("east to join", lambda: journal.run(run_id)["gang"], 30)
    # alone, east's claim is let go at the deadline and the run stays queued
    released = wait_until("the partial claim to be released",
                          lambda: (r := journal.run(run_id))["gang"] == [] and r, GANG_WAIT + 10)
    assert released["status"] == "QUEUED"
    started = time.monotonic()
    journal.runner("west")
    run = journal.wait_status(run_id, ["SUCCEEDED", "FAILED", "LOST"], 180)
    print(f"\n[figure] second runner started → world-4 run on 2 nodes SUCCEEDED after "
          f"{time.monotonic() - started:.1f}s")
    assert run["status"] == "SUCCEEDED", run["reason"]
    assert [e["to"] for e in run["events"]] == ["QUEUED", "LEASED", "RUNNING", "SUCCEEDED"]
    assert sorted(n["runner"] for n in run["gang"]) == ["east", "west"]
    assert [n["status"] for n in run["gang"]] == ["DONE", "DONE"]
    result = run["result"]  # one result: rank 0's, from node 0
    assert result["status"] == "succeeded" and result["environment"]["world_size"] == 4
    log = api(journal.base, f"/api/v1/runs/{run_id}/logs?offset=0")[1]
    lines = [ln for ln in log["data"].splitlines() if ln.strip()]
    assert lines and all(ln.startswith("[node") for ln in lines), lines[:5]
    for rank in range(4):  # every rank's lines, tagged with its node
        assert f"[node{rank // 2} rank{rank}]:worker rank={rank}" in log["data"]
    assert "[node0 rank0]:progress step=" in log["data"]
    assert "[node1]:result status=succeeded node=1" in log["data"]
    assert {a["name"] for a in run["artifacts"]} >= {"events.jsonl", "events.node1.jsonl"}
    for out in out_dirs(journal, run).values():
        wait_until("the node's processes to end", lambda o=out: not processes_of(o), 20)


def test_killing_one_node_stops_every_rank_and_the_run_is_lost(journal):
    journal.runner("north", plugin="sleep_all.py")
    journal.runner("south", plugin="sleep_all.py")
    run_id = create(journal, "data_parallel", SLEEPING)
    journal.wait_status(run_id, "RUNNING", 90)
    run = wait_until("both nodes to start", lambda: (r := journal.run(run_id))["gang"] and all(
        n["status"] == "STARTED" for n in r["gang"]) and r, 30)
    outs = {}
    for node in run["gang"]:
        pids = journal.pids(node["runner"], run_id)  # launcher, torchrun and 2 ranks up
        outs[node["runner"]] = pids["out"]
    before = {pid for out in outs.values() for pid in processes_of(out)}
    assert len(before) >= 8  # on each host: the lab's launcher, torchrun, 2 ranks
    first = run["gang"][0]["runner"]  # node 0: it hosts the rendezvous and rank 0
    survivor = run["gang"][1]["runner"]
    os.kill(agent_of(journal, first).pid, signal.SIGKILL)
    killed = time.monotonic()
    lost = journal.wait_status(run_id, ["LOST", "FAILED"], TTL + REAPER + 20)
    detected = time.monotonic() - killed
    if lost["status"] == "LOST":  # node 0 fell silent: the reaper says which node
        assert lost["reason_code"] == "lease_expired" and f"node 0 ({first})" in lost["reason"]
    else:  # (or the survivor's ranks noticed first: FAILED, naming the node)
        assert lost["reason"].startswith(f"node 1 ({survivor})"), lost["reason"]
    # every process of the run on both hosts, by PID: node 0's died with its runner, the
    # survivor's were killed by its runner on the 409 of its next heartbeat
    wait_until("every process of the run to end", lambda: not any(map(alive, before)), 20)
    assert not any(processes_of(out) for out in outs.values())
    ended = time.monotonic() - killed
    print(f"\n[figure] node 0's runner killed -9 → run {lost['status']} after {detected:.1f}s "
          f"(TTL {TTL}s + reaper {REAPER}s); all {len(before)} processes of the run on both "
          f"hosts gone after {ended:.1f}s")
    new_id = create(journal, "gemm_roofline", {"device": "cpu", "sizes": ["64"], "iters": 1},
                    nodes=1)
    done = journal.wait_status(new_id, ["SUCCEEDED", "FAILED", "LOST"], 120)
    assert done["status"] == "SUCCEEDED" and done["runner"] == survivor
    assert journal.run(run_id)["status"] == lost["status"]  # never re-run on its own


def agent_of(journal, name):
    return next(p for p in journal.procs if "--work-dir" in p.args
                and str(p.args[p.args.index("--work-dir") + 1]).endswith(f"runner-{name}"))
