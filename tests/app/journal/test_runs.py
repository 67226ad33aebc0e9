"""Runs and the runner protocol through the app (test client, real SQLite): creating runs
against the catalogue, leasing with epochs, heartbeats, logs, results and transitions,
cancel and rerun, and which runner may take which run.

Schedules are in test_schedules.py, result cards in the weekly letter in test_posting.py.
"""

import datetime as dt

import pytest

from app.journal import run_files, runs
from app.models import Run, RunEvent
from tests.helpers import SMALL, add_token, bearer, count


@pytest.fixture
def runner(app, db):
    """A registered runner: (client, headers)."""
    headers = bearer(add_token(db, "gpu1", "runner"))
    client = app.test_client()
    r = client.post("/api/v1/runner/register", json={"labels": {"gpu_count": 0}},
                    headers=headers)
    assert r.status_code == 200, r.get_json()
    return client, headers


def new_run(client, experiment="data_parallel", anyway=False, **params):
    r = client.post("/api/v1/runs", json={"experiment": experiment, "params": params or SMALL,
                                          **({"queue_anyway": True} if anyway else {})})
    assert r.status_code == 201, r.get_json()
    return r.get_json()


def lease(runner, wait=0):
    client, headers = runner
    return client.post("/api/v1/runner/lease", json={"wait": wait}, headers=headers)


def call(runner, run_id, what, body):
    client, headers = runner
    return client.post(f"/api/v1/runner/runs/{run_id}/{what}", json=body, headers=headers)


def test_catalogue_and_create_with_defaults(client):
    names = [e["name"] for e in client.get("/api/v1/experiments").get_json()["experiments"]]
    assert {"data_parallel", "pipeline", "tensor_parallel", "zero", "collectives"} <= set(names)
    run = new_run(client)
    assert run["status"] == "QUEUED" and run["params"]["world_size"] == 2  # default filled in
    assert run["events"][0]["to"] == "QUEUED"


@pytest.mark.parametrize("body, field", [
    ({"experiment": "nope"}, "experiment"),
    ({}, "experiment"),
    ({"experiment": 5}, "experiment"),
    ({"experiment": "data_parallel", "params": {"world_size": 99}}, "world_size"),
    ({"experiment": "data_parallel", "params": {"steps": "many"}}, "steps"),
    ({"experiment": "data_parallel", "params": {"bogus": 1}}, "bogus"),
    ({"experiment": "data_parallel", "params": []}, "params"),
    ({"experiment": "tensor_parallel", "params": {"heads": 3}}, "heads"),
    ({"experiment": "data_parallel", "extra": 1}, "extra"),
])
def test_bad_runs_are_refused_with_the_field_named(client, db, body, field):
    r = client.post("/api/v1/runs", json=body)
    assert r.status_code == 422
    assert r.get_json()["error"]["field"] == field
    assert count(db, Run) == 0 and count(db, RunEvent) == 0


def test_lease_heartbeat_logs_result_and_success(runner, client, app):
    run = new_run(client)
    answer = lease(runner).get_json()
    spec = answer["run"]
    assert spec["id"] == run["id"] and spec["epoch"] == 1 and answer["heartbeat_s"] > 0
    assert lease(runner).status_code == 204  # nothing else queued
    assert call(runner, run["id"], "transition", {"epoch": 1, "to": "RUNNING"}).status_code == 200
    beat = call(runner, run["id"], "heartbeat", {"epoch": 1, "step": 3, "total": 10,
                                                  "progress": {"tokens_per_s": 123.0}})
    assert beat.status_code == 200 and beat.get_json()["cancel"] is False
    assert call(runner, run["id"], "logs", {"epoch": 1, "offset": 0,
                                            "data": "hello é\n"}).get_json()["size"] == 9
    # the same chunk again (a retry) is acknowledged, not duplicated
    assert call(runner, run["id"], "logs", {"epoch": 1, "offset": 0,
                                            "data": "hello é\n"}).get_json()["size"] == 9
    gap = call(runner, run["id"], "logs", {"epoch": 1, "offset": 20, "data": "gap"})
    assert gap.status_code == 409
    assert gap.get_json()["error"]["code"] == "log_gap" and gap.get_json()["error"]["size"] == 9
    logs = client.get(f"/api/v1/runs/{run['id']}/logs?offset=0").get_json()
    assert logs["data"] == "hello é\n" and logs["offset"] == 9
    # SUCCEEDED needs a result first
    assert call(runner, run["id"], "transition", {"epoch": 1, "to": "SUCCEEDED"}) \
        .status_code == 409
    call(runner, run["id"], "result", {"epoch": 1, "result": {"schema_version": 1,
                                                             "environment": {"torch": "x"}}})
    call(runner, run["id"], "metrics", {"epoch": 1, "points": [
        {"key": "tokens_per_s", "step": 1, "value": 5.0}]})
    done = call(runner, run["id"], "transition", {"epoch": 1, "to": "SUCCEEDED", "exit_code": 0})
    assert done.get_json()["status"] == "SUCCEEDED"
    got = client.get(f"/api/v1/runs/{run['id']}").get_json()
    assert got["status"] == "SUCCEEDED" and got["environment"]["torch"] == "x"
    assert got["progress"]["step"] == 3 and got["progress"]["tokens_per_s"] == 123.0
    assert [e["to"] for e in got["events"]] == ["QUEUED", "LEASED", "RUNNING", "SUCCEEDED"]
    metrics = client.get(f"/api/v1/runs/{run['id']}/metrics").get_json()["metrics"]
    assert metrics == {"tokens_per_s": [[1, 5.0]]}
    # a finished run cannot be reported again
    assert call(runner, run["id"], "heartbeat", {"epoch": 1}).status_code == 409


def test_stale_epoch_is_409_and_changes_nothing(runner, client, db):
    run = new_run(client)
    lease(runner)
    with db.write() as session:  # the reaper declared it lost; a rerun would be a new run
        runs.reap(session, now=dt.datetime(2100, 1, 1))
    for what, body in [("heartbeat", {"epoch": 1}), ("logs", {"epoch": 1, "offset": 0,
                                                               "data": "x"}),
                       ("result", {"epoch": 1, "result": {}}),
                       ("transition", {"epoch": 1, "to": "SUCCEEDED"})]:
        r = call(runner, run["id"], what, body)
        assert r.status_code == 409 and r.get_json()["error"]["code"] == "stale_lease"
    got = client.get(f"/api/v1/runs/{run['id']}").get_json()
    assert got["status"] == "LOST" and got["reason_code"] == "lease_expired"
    assert got["log_size"] == 0 and got["result"] is None
    assert call(runner, run["id"], "heartbeat", {"epoch": 2}).status_code == 409


@pytest.mark.parametrize("what, body", [
    ("heartbeat", {}), ("heartbeat", {"epoch": "1"}), ("heartbeat", {"epoch": True}),
    ("logs", {"epoch": 1, "offset": -1, "data": "x"}), ("logs", {"epoch": 1, "offset": 0}),
    ("logs", {"epoch": 1, "offset": 0, "data": "x" * (64 * 1024 + 1)}),
    ("metrics", {"epoch": 1, "points": [{"key": "k"}]}),
    ("metrics", {"epoch": 1, "points": [{"key": "k", "step": 1, "value": 1}] * 1001}),
    ("result", {"epoch": 1, "result": [1]}),
    ("transition", {"epoch": 1, "to": "LOST"}), ("transition", {"epoch": 1, "to": "RUNNING",
                                                                 "reason_code": "bogus"}),
    ("transition", {"epoch": 1, "to": "RUNNING", "exit_code": "x"}),
])
def test_bad_runner_calls_are_4xx_and_change_nothing(runner, client, what, body):
    run = new_run(client)
    lease(runner)
    r = call(runner, run["id"], what, body)
    assert 400 <= r.status_code < 500
    got = client.get(f"/api/v1/runs/{run['id']}").get_json()
    assert got["status"] == "LEASED" and got["log_size"] == 0 and got["result"] is None


def test_a_runaway_log_is_capped_but_offsets_keep_counting(runner, client, monkeypatch):
    monkeypatch.setattr(run_files, "MAX_LOG_BYTES", 10)
    run = new_run(client)
    lease(runner)
    assert call(runner, run["id"], "logs", {"epoch": 1, "offset": 0,
                                            "data": "0123456789abc"}).get_json()["size"] == 13
    assert call(runner, run["id"], "logs", {"epoch": 1, "offset": 13,
                                            "data": "more"}).get_json()["size"] == 17
    logs = client.get(f"/api/v1/runs/{run['id']}/logs?offset=0").get_json()
    assert logs["data"] == "0123456789" and logs["truncated"] and logs["size"] == 17


def test_cancel_queued_and_running_and_rerun(runner, client):
    queued = new_run(client)
    assert client.post(f"/api/v1/runs/{queued['id']}/cancel").get_json()["status"] == "CANCELLED"
    assert client.post(f"/api/v1/runs/{queued['id']}/cancel").status_code == 409
    running = new_run(client)
    lease(runner)
    call(runner, running["id"], "transition", {"epoch": 1, "to": "RUNNING"})
    assert client.post(f"/api/v1/runs/{running['id']}/cancel").get_json()["cancel_requested"]
    assert call(runner, running["id"], "heartbeat", {"epoch": 1}).get_json()["cancel"] is True
    call(runner, running["id"], "transition", {"epoch": 1, "to": "CANCELLED",
                                               "reason_code": "cancelled"})
    again = client.post(f"/api/v1/runs/{running['id']}/rerun")
    assert again.status_code == 201
    child = again.get_json()
    assert child["parent_id"] == running["id"] and child["status"] == "QUEUED"
    assert child["params"] == running["params"] and child["trigger"] == "rerun"
    assert client.get(f"/api/v1/runs/{running['id']}").get_json()["reruns"] == [child["id"]]


def test_list_filters_and_compare(client):
    a = new_run(client)
    b = new_run(client, "data_parallel", steps=2, warmup=0)
    assert [r["id"] for r in client.get("/api/v1/runs?status=queued").get_json()["runs"]] == [
        b["id"], a["id"]]
    assert client.get("/api/v1/runs?status=nope").status_code == 422
    assert client.get("/api/v1/runs?week=2024-W99").status_code == 422
    assert client.get("/api/v1/runs?experiment=zero").get_json()["runs"] == []
    diff = client.get(f"/api/v1/compare?ids={a['id']},{b['id']}").get_json()
    assert diff["differing_params"] == ["steps"]
    assert client.get("/api/v1/compare?ids=1").status_code == 422
    assert client.get("/api/v1/compare?ids=1,x").status_code == 422
    assert client.get("/api/v1/compare?ids=1,999").status_code == 404


# -- which runner takes which run ---------------------------------------------------------


def test_runner_tokens_reach_only_the_runner_api(runner, client):
    c, headers = runner
    assert c.get("/api/v1/entries", headers=headers).status_code == 403
    assert c.post("/api/v1/runs", json={"experiment": "zero"}, headers=headers).status_code == 403
    bad = bearer("cp_wrong")
    assert c.post("/api/v1/runner/lease", json={}, headers=bad).status_code == 401


def test_runs_needing_gpus_go_only_to_runners_that_have_them(runner, client, db):
    new_run(client, anyway=True, device="cuda", world_size=2, steps=1)  # none can take it yet
    assert lease(runner).status_code == 204  # this runner has no GPU
    big = bearer(add_token(db, "gpu8", "runner"))
    client.post("/api/v1/runner/register", json={"labels": {"gpu_count": 8}}, headers=big)
    assert lease((client, big)).get_json()["run"]["params"]["device"] == "cuda"


def test_a_run_can_require_a_gpu_model(runner, client, db):
    r = client.post("/api/v1/runs", json={"experiment": "gemm_roofline", "queue_anyway": True,
                                          "requires": {"gpu_model": "H200"}})
    assert r.status_code == 201 and r.get_json()["requires"] == {"gpu_model": "H200"}
    assert lease(runner).status_code == 204  # this runner has no H200
    h200 = bearer(add_token(db, "h200", "runner"))
    client.post("/api/v1/runner/register", json={"labels": {"gpu_count": 1,
                                                            "gpu_model": "NVIDIA H200"}},
                headers=h200)
    assert lease((client, h200)).get_json()["run"]["id"] == r.get_json()["id"]
    rerun = client.post(f"/api/v1/runs/{r.get_json()['id']}/rerun").get_json()
    assert rerun["requires"] == {"gpu_model": "H200"}


@pytest.mark.parametrize("requires", [[1], {"gpu_model": 5}, {"gpu_model": ""},
                                      {"gpu_count": -1}, {"gpu_count": True}, {"cpu": 1}])
def test_bad_requirements_are_refused(client, db, requires):
    r = client.post("/api/v1/runs", json={"experiment": "gemm_roofline",
                                          "requires": requires})
    assert r.status_code == 422 and r.get_json()["error"]["field"] == "requires"
    assert count(db, Run) == 0


def test_two_runners_never_lease_the_same_run(app, db, client):
    tokens = {name: bearer(add_token(db, name, "runner")) for name in ("a", "b")}
    for headers in tokens.values():
        client.post("/api/v1/runner/register", json={"labels": {}}, headers=headers)
    ids = [new_run(client)["id"] for _ in range(6)]
    taken = []
    for _ in range(4):
        for headers in tokens.values():
            r = client.post("/api/v1/runner/lease", json={"wait": 0}, headers=headers)
            if r.status_code == 200:
                taken.append(r.get_json()["run"]["id"])
    assert sorted(taken) == ids  # every run exactly once
