"""Runs that span hosts (nodes > 1): the gang lease through the app (test client, real
SQLite, no torch). Two real runner agents running one such run:
tests/jobs/runner/test_gang_agents.py.
"""

from __future__ import annotations

import datetime as dt
import socket
import time

import pytest
import sqlalchemy as sa

from app.journal import runs
from app.models import Run, RunEvent, RunNode
from jobs.runner.node import RDZV_FD_ENV, Reservation
from tests.helpers import SMALL, add_token, bearer, count, form_for

WORLD4 = {"world_size": 4, "device": "cpu"}
A = {"address": "127.0.0.1", "port": 29411}
B = {"address": "127.0.0.2", "port": 29422}


# -- the gang lease, through the app ------------------------------------------------------


def runner_client(app, db, name):
    headers = bearer(add_token(db, name, "runner"))
    client = app.test_client()
    r = client.post("/api/v1/runner/register", json={"labels": {"gpu_count": 0}},
                    headers=headers)
    assert r.status_code == 200, r.get_json()
    return client, headers


@pytest.fixture
def gang_app(make_app):
    return make_app(GANG_WAIT_S=30.0, LEASE_TTL_S=60.0)


@pytest.fixture
def a(gang_app):
    return runner_client(gang_app, gang_app.extensions["db"], "a")


@pytest.fixture
def b(gang_app):
    return runner_client(gang_app, gang_app.extensions["db"], "b")


def lease(runner, node=None):
    client, headers = runner
    body = {"wait": 0, **({"node": node} if node else {})}
    r = client.post("/api/v1/runner/lease", json=body, headers=headers)
    return r.status_code, (r.get_json() if r.status_code == 200 else None)


def call(runner, run_id, what, body):
    client, headers = runner
    return client.post(f"/api/v1/runner/runs/{run_id}/{what}", json=body, headers=headers)


def new_run(client, nodes=2, experiment="collectives", **params):
    r = client.post("/api/v1/runs", json={"experiment": experiment,
                                          "params": params or WORLD4, "nodes": nodes})
    assert r.status_code == 201, r.get_json()
    return r.get_json()


def get(client, run_id):
    return client.get(f"/api/v1/runs/{run_id}").get_json()


def formed(a, b, client):
    """A nodes=2 run leased by a (node 0) and b (node 1), both RUNNING: (run id, epoch)."""
    run = new_run(client)
    assert lease(a, A) == (204, None)  # a joined; waits for another node
    status, answer = lease(b, B)
    assert status == 200
    epoch = answer["run"]["epoch"]
    assert answer["run"]["gang"] == {"nodes": 2, "node_rank": 1, "endpoint": "127.0.0.1:29411",
                                     "rdzv_id": f"run-{run['id']}-{epoch}"}
    status, first = lease(a, A)  # a's next poll hands it node 0 of the same lease
    assert status == 200 and first["run"]["gang"]["node_rank"] == 0
    assert first["run"]["epoch"] == epoch
    for runner in (a, b):
        assert call(runner, run["id"], "transition",
                    {"epoch": epoch, "to": "RUNNING"}).status_code == 200
    return run["id"], epoch


BAD_NODES = [  # (nodes, params, what the refusal says)
    (0, WORLD4, "from 1 to 16"), (17, WORLD4, "from 1 to 16"), ("2", WORLD4, "from 1 to 16"),
    (2.0, WORLD4, "from 1 to 16"), (True, WORLD4, "from 1 to 16"),
    (3, WORLD4, "does not split evenly"),
    (2, {"world_size": 3, "device": "cpu"}, "does not split evenly"),
]


def test_bad_nodes_are_refused_and_change_nothing(client, db):
    for nodes, params, why in BAD_NODES:
        r = client.post("/api/v1/runs", json={"experiment": "collectives", "params": params,
                                              "nodes": nodes})
        assert r.status_code == 422, (nodes, r.get_json())
        error = r.get_json()["error"]
        assert error["field"] == "nodes" and why in error["message"], (nodes, error)
    r = client.post("/api/v1/runs", json={"experiment": "gemm_roofline", "nodes": 2})
    assert r.status_code == 422 and r.get_json()["error"]["field"] == "nodes"
    assert count(db, Run) == 0 and count(db, RunEvent) == 0 and count(db, RunNode) == 0


def test_one_host_is_the_default_and_leases_as_before(client, a):
    run = new_run(client, nodes=None, experiment="data_parallel", **SMALL)
    assert run["nodes"] == 1 and run["gang"] == []
    status, answer = lease(a, A)
    assert status == 200 and "gang" not in answer["run"]


def test_n_runners_lease_together_all_or_nothing(client, a, b, gang_app):
    run = new_run(client)
    assert get(client, run["id"])["requires"] == {}
    assert lease(a, A) == (204, None)
    partial = get(client, run["id"])
    assert partial["status"] == "QUEUED"
    assert partial["gang"] == [{"node_rank": 0, "runner": "a", "status": "JOINED"}]
    assert lease(a, A) == (204, None)  # still waiting: it joins nothing else meanwhile
    run_id, epoch = formed_from_partial(a, b, run)
    leased = get(client, run_id)
    assert [e["to"] for e in leased["events"]] == ["QUEUED", "LEASED", "RUNNING"]
    assert "a, b" in leased["events"][1]["reason"] and leased["runner"] == "a"
    assert [(n["runner"], n["status"]) for n in leased["gang"]] == [("a", "STARTED"),
                                                                      ("b", "STARTED")]


def formed_from_partial(a, b, run):
    status, answer = lease(b, B)
    assert status == 200 and answer["run"]["gang"]["node_rank"] == 1
    status, first = lease(a, A)
    assert status == 200 and first["run"]["gang"]["node_rank"] == 0
    epoch = first["run"]["epoch"]
    for runner in (a, b):
        assert call(runner, run["id"], "transition",
                    {"epoch": epoch, "to": "RUNNING"}).status_code == 200
    return run["id"], epoch


def test_the_new_run_form_asks_for_nodes(client, db):
    page = client.get("/experiments/collectives/run").text
    assert 'name="nodes"' in page and 'name="nodes"' not in client.get(
        "/experiments/gemm_roofline/run").text  # one process: nothing to spread
    form = form_for("collectives", world_size=4, device="cpu")
    bad = client.post("/experiments/collectives/run", data={**form, "nodes": "3"})
    assert bad.status_code == 422 and "does not split evenly over 3 nodes" in bad.text
    assert 'id="run-nodes-error"' in bad.text and 'value="3"' in bad.text
    assert count(db, Run) == 0
    r = client.post("/experiments/collectives/run", data={**form, "nodes": "2",
                                                          "queue_anyway": "on"})
    assert r.status_code == 303, r.text
    assert get(client, int(r.location.rsplit("/", 1)[1]))["nodes"] == 2


def test_a_runner_that_offers_no_node_never_joins_a_gang(client, a):
    gang = new_run(client)
    single = new_run(client, nodes=1, experiment="data_parallel", **SMALL)
    status, answer = lease(a)  # an older agent: no node offered
    assert status == 200 and answer["run"]["id"] == single["id"]
    assert get(client, gang["id"])["gang"] == []


def test_the_partial_claim_is_released_at_the_deadline(make_app):
    app = make_app(GANG_WAIT_S=0.4)
    db = app.extensions["db"]
    client = app.test_client()
    lone = runner_client(app, db, "lone")
    gang = new_run(client)
    behind = new_run(client, nodes=1, experiment="data_parallel", **SMALL)
    assert lease(lone, A) == (204, None)
    time.sleep(0.5)
    # the deadline passed: the claim is let go, the run stays QUEUED, and the lone runner
    # takes the run queued behind it instead of sitting on the gang
    status, answer = lease(lone, A)
    assert status == 200 and answer["run"]["id"] == behind["id"]
    after = get(client, gang["id"])
    assert after["status"] == "QUEUED" and after["gang"] == []
    assert [e["to"] for e in after["events"]] == ["QUEUED"]
    with db.write() as session:
        assert session.scalar(sa.select(RunNode.status)) == "RELEASED"  # cooling off
    time.sleep(0.3)  # half a deadline later it may join again
    call(lone, behind["id"], "result", {"epoch": 1, "result": {"schema_version": 1}})
    call(lone, behind["id"], "transition", {"epoch": 1, "to": "FAILED", "reason": "x",
                                            "reason_code": "exit_code"})
    assert lease(lone, A) == (204, None)
    assert get(client, gang["id"])["gang"] == [{"node_rank": 0, "runner": "lone",
                                                 "status": "JOINED"}]


def test_bad_node_offers_are_refused_and_change_nothing(client, a, gang_app):
    run = new_run(client)
    client_, headers = a
    for node in ({"address": "a b", "port": 1}, {"address": "h", "port": 0},
                 {"address": "h", "port": "80"}, {"address": "h"}, "h:80",
                 {"address": "h", "port": 80, "x": 1}, {"address": "x" * 101, "port": 80}):
        r = client_.post("/api/v1/runner/lease", json={"wait": 0, "node": node},
                         headers=headers)
        assert r.status_code == 422 and r.get_json()["error"]["field"] == "node", node
    assert get(client, run["id"])["gang"] == [] and count(gang_app.extensions["db"], RunNode) == 0


def test_each_node_heartbeats_and_a_silent_node_makes_the_run_lost(client, a, b, gang_app):
    run_id, epoch = formed(a, b, client)
    beat = call(b, run_id, "heartbeat", {"epoch": epoch, "step": 0, "total": 0})
    assert beat.status_code == 200
    assert call(a, run_id, "heartbeat", {"epoch": epoch, "step": 5, "total": 9}).status_code == 200
    call(b, run_id, "heartbeat", {"epoch": epoch, "step": 0, "total": 0})
    assert get(client, run_id)["progress"]["step"] == 5  # node 0's progress, not node 1's
    db = gang_app.extensions["db"]
    with db.write() as session:  # b falls silent: its lease runs out, a's does not
        node = session.scalar(sa.select(RunNode).where(RunNode.node_rank == 1))
        node.lease_expires_at = dt.datetime(2000, 1, 1)
    call(a, run_id, "heartbeat", {"epoch": epoch})
    with db.write() as session:
        assert runs.reap(session) == [run_id]
    lost = get(client, run_id)
    assert lost["status"] == "LOST" and lost["reason_code"] == "lease_expired"
    assert "node 1 (b)" in lost["reason"]
    # node 0 learns at its next heartbeat: 409, and it kills its job
    r = call(a, run_id, "heartbeat", {"epoch": epoch})
    assert r.status_code == 409 and r.get_json()["error"]["code"] == "stale_lease"


def test_the_run_succeeds_when_every_node_has_and_node_0_sent_the_result(client, a, b):
    run_id, epoch = formed(a, b, client)
    r = call(b, run_id, "result", {"epoch": epoch, "result": {"schema_version": 1}})
    assert r.status_code == 422  # only node 0 sends the result
    assert call(b, run_id, "transition", {"epoch": epoch, "to": "SUCCEEDED",
                                          "exit_code": 0}).status_code == 200
    assert get(client, run_id)["status"] == "RUNNING"  # node 0 is still working
    assert call(b, run_id, "heartbeat", {"epoch": epoch}).status_code == 409  # b is done
    assert call(a, run_id, "result", {"epoch": epoch, "result": {
        "schema_version": 1, "status": "succeeded"}}).status_code == 200
    assert call(a, run_id, "transition", {"epoch": epoch, "to": "SUCCEEDED",
                                          "exit_code": 0}).status_code == 200
    done = get(client, run_id)
    assert done["status"] == "SUCCEEDED" and done["result"]["status"] == "succeeded"
    assert [n["status"] for n in done["gang"]] == ["DONE", "DONE"]


def test_a_failing_node_fails_the_run_at_once_and_names_the_node(client, a, b):
    run_id, epoch = formed(a, b, client)
    r = call(b, run_id, "transition", {"epoch": epoch, "to": "FAILED", "exit_code": 4,
                                       "reason": "rank 3 failed: RuntimeError: boom",
                                       "reason_code": "rank_failed"})
    assert r.status_code == 200
    failed = get(client, run_id)
    assert failed["status"] == "FAILED" and failed["reason_code"] == "rank_failed"
    assert failed["reason"] == "node 1 (b): rank 3 failed: RuntimeError: boom"
    assert call(a, run_id, "heartbeat", {"epoch": epoch}).status_code == 409


def test_the_nodes_logs_merge_into_one_by_their_own_offsets(client, a, b):
    run_id, epoch = formed(a, b, client)

    def send(runner, offset, data):
        r = call(runner, run_id, "logs", {"epoch": epoch, "offset": offset, "data": data})
        return r.status_code, r.get_json()

    assert send(a, 0, "[node0 rank0]:one\n") == (200, {"size": 18})
    assert send(b, 0, "[node1 rank2]:two\n") == (200, {"size": 18})
    assert send(b, 0, "[node1 rank2]:two\n") == (200, {"size": 18})  # a retry: kept once
    assert send(a, 18, "[node0 rank1]:three\n")[0] == 200
    status, body = send(b, 40, "lost?\n")
    assert status == 409 and body["error"]["code"] == "log_gap"
    log = client.get(f"/api/v1/runs/{run_id}/logs?offset=0").get_json()["data"]
    assert log == "[node0 rank0]:one\n[node1 rank2]:two\n[node0 rank1]:three\n"


def test_the_offered_port_is_held_until_node_0_is_handed_it():
    held = Reservation("127.0.0.1")
    try:
        offer = held.offer()
        assert held.offer() == offer  # every lease call offers the same, still held
        with socket.socket() as thief, pytest.raises(OSError):
            thief.bind(("127.0.0.1", offer["port"]))
        assert held.handed(None) == {}  # a run on one host: nothing to hand
        assert held.handed({"node_rank": 1}) == {}  # node 1 connects to node 0's
        handed = held.handed({"node_rank": 0})
        fd = held.sock.fileno()
        assert handed == {"env": {RDZV_FD_ENV: str(fd)}, "pass_fds": (fd,)}
        held.renew()  # after the run: the next offer is a socket of its own
        assert held.sock is None and held.offer()["address"] == "127.0.0.1"
    finally:
        held.close()

