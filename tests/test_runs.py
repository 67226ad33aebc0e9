"""Runs, the runner protocol and schedules through the app (test client, real SQLite)."""

import datetime as dt

import pytest
import sqlalchemy as sa

from app.journal import posting, run_files, runs, schedules
from app.models import Run, RunEvent, Schedule, Token
from app.web.auth.identity import hash_token

SMALL = {"steps": 1, "warmup": 0}


@pytest.fixture
def runner(app, db):
    """A registered runner: (client, headers)."""
    with db.write() as session:
        session.add(Token(name="gpu1", role="runner", token_hash=hash_token("cp_gpu1")))
    headers = {"Authorization": "Bearer cp_gpu1"}
    client = app.test_client()
    r = client.post("/api/v1/runner/register", json={"labels": {"gpu_count": 0}},
                    headers=headers)
    assert r.status_code == 200, r.get_json()
    return client, headers


def count(db, model, *where):
    with db.read() as session:
        return session.scalar(sa.select(sa.func.count()).select_from(model).where(*where))


def new_run(client, experiment="data_parallel", **params):
    r = client.post("/api/v1/runs", json={"experiment": experiment, "params": params or SMALL})
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


def test_runner_tokens_reach_only_the_runner_api(runner, client):
    c, headers = runner
    assert c.get("/api/v1/entries", headers=headers).status_code == 403
    assert c.post("/api/v1/runs", json={"experiment": "zero"}, headers=headers).status_code == 403
    bad = {"Authorization": "Bearer cp_wrong"}
    assert c.post("/api/v1/runner/lease", json={}, headers=bad).status_code == 401


def test_runs_needing_gpus_go_only_to_runners_that_have_them(runner, client, db):
    new_run(client, device="cuda", world_size=2, steps=1)
    assert lease(runner).status_code == 204  # this runner has no GPU
    with db.write() as session:
        session.add(Token(name="gpu8", role="runner", token_hash=hash_token("cp_gpu8")))
    big = {"Authorization": "Bearer cp_gpu8"}
    client.post("/api/v1/runner/register", json={"labels": {"gpu_count": 8}}, headers=big)
    assert lease((client, big)).get_json()["run"]["params"]["device"] == "cuda"


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


def test_two_runners_never_lease_the_same_run(app, db, client):
    tokens = {}
    with db.write() as session:
        for name in ("a", "b"):
            session.add(Token(name=name, role="runner", token_hash=hash_token(f"cp_{name}")))
            tokens[name] = {"Authorization": f"Bearer cp_{name}"}
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


# -- schedules ----------------------------------------------------------------------------

def make_schedule(client, **extra):
    body = {"experiment": "collectives", "cron": "0 2 * * *", "timezone": "UTC", **extra}
    r = client.post("/api/v1/schedules", json=body)
    assert r.status_code == 201, r.get_json()
    return r.get_json()


@pytest.mark.parametrize("body, field", [
    ({"cron": "61 * * * *"}, "cron"), ({"cron": "* * *"}, "cron"), ({"cron": ""}, "cron"),
    ({"cron": "0 2 31 2 *"}, "cron"), ({"cron": "0 2 * * funday"}, "cron"),
    ({"timezone": "Mars/Olympus"}, "timezone"), ({"experiment": "nope"}, "experiment"),
    ({"params": {"world_size": 100}}, "world_size"), ({"enabled": "yes"}, "enabled"),
    ({"misfire_grace_s": -1}, "misfire_grace_s"), ({"colour": "red"}, "colour"),
])
def test_bad_schedules_are_refused(client, db, body, field):
    base = {"experiment": "collectives", "cron": "0 2 * * *", "timezone": "UTC"}
    r = client.post("/api/v1/schedules", json={**base, **body})
    assert r.status_code == 422 and r.get_json()["error"]["field"] == field
    assert count(db, Schedule) == 0
    s = make_schedule(client)
    r = client.put(f"/api/v1/schedules/{s['id']}", json=body)
    assert r.status_code == 422
    assert client.get(f"/api/v1/schedules/{s['id']}").get_json()["cron"] == "0 2 * * *"


def test_schedule_shows_next_fires_in_its_zone(client):
    s = make_schedule(client, cron="0 2 * * sun", timezone="Europe/Berlin")
    assert len(s["next_fires"]) == 5
    assert all(t.endswith("+01:00") or t.endswith("+02:00") for t in s["next_fires_local"])
    assert all("T02:00:00" in t for t in s["next_fires_local"])


def fire(db, schedule_id, now):
    with db.write() as session:
        return schedules.fire_due(session, session.get(Schedule, schedule_id), now)


def utc(*args):
    return dt.datetime(*args, tzinfo=dt.UTC)


def test_fires_coalesce_within_grace_and_never_double(client, db):
    s = make_schedule(client, cron="0 * * * *", misfire_grace_s=3 * 3600)
    with db.write() as session:
        session.get(Schedule, s["id"]).created_at = dt.datetime(2026, 1, 1, 0, 30)
    # down from 00:30 to 03:10: fires at 01:00, 02:00 and 03:00 were missed → one run, at 03:00
    run = fire(db, s["id"], utc(2026, 1, 1, 3, 10))
    assert run is not None and run.scheduled_for == dt.datetime(2026, 1, 1, 3, 0)
    assert fire(db, s["id"], utc(2026, 1, 1, 3, 20)) is None  # the same fire: nothing new
    assert count(db, Run) == 1
    # a second scheduler by mistake, with a stale view of last_fired_at: the unique key holds
    with db.write() as session:
        session.get(Schedule, s["id"]).last_fired_at = dt.datetime(2026, 1, 1, 2, 0)
    assert fire(db, s["id"], utc(2026, 1, 1, 3, 30)) is None
    assert count(db, Run) == 1


def test_fires_older_than_grace_are_dropped(client, db):
    s = make_schedule(client, cron="0 2 * * *", misfire_grace_s=3600)
    with db.write() as session:
        session.get(Schedule, s["id"]).created_at = dt.datetime(2026, 1, 1, 0, 0)
    assert fire(db, s["id"], utc(2026, 1, 1, 5, 0)) is None  # 02:00 is three hours late
    assert count(db, Run) == 0
    assert fire(db, s["id"], utc(2026, 1, 2, 2, 0, 30)).scheduled_for == dt.datetime(2026, 1, 2, 2)


def test_fire_while_previous_unfinished_is_a_visible_skip(client, db):
    s = make_schedule(client, cron="0 * * * *")
    with db.write() as session:
        session.get(Schedule, s["id"]).created_at = dt.datetime(2026, 1, 1, 0, 30)
    first = fire(db, s["id"], utc(2026, 1, 1, 1, 0, 5))
    second = fire(db, s["id"], utc(2026, 1, 1, 2, 0, 5))
    assert first.status == "QUEUED" and second.status == "SKIPPED"
    assert f"run {first.id}" in second.reason
    listed = client.get(f"/api/v1/runs?schedule={s['id']}").get_json()["runs"]
    assert [r["status"] for r in listed] == ["SKIPPED", "QUEUED"]


def test_disabled_schedules_do_not_fire(client, db):
    s = make_schedule(client, cron="* * * * *")
    client.put(f"/api/v1/schedules/{s['id']}", json={"enabled": False})
    assert fire(db, s["id"], utc(2030, 1, 1)) is None


# -- cards into the letter ----------------------------------------------------------------

def finished_run(db, status="SUCCEEDED"):
    with db.write() as session:
        run = runs.create(session, "data_parallel", SMALL, actor="t")
        run.status, run.finished_at = status, dt.datetime(2024, 3, 27, 12)
        if status == "SUCCEEDED":
            run.result = {"strategies": [{"strategy": "ddp", "label": "DDP",
                                          "correctness": {"passed": True,
                                                          "max_grad_abs_error": 1e-9},
                                          "step_time_s": {"median": 0.02, "p10": 0.019,
                                                          "p90": 0.03},
                                          "prediction": {"step_time_s": 0.01,
                                                         "dominant": "comm"},
                                          "ratios": {"step_time": 2.0},
                                          "tokens_per_s": 1000.0}]}
        return run.id


def test_finished_runs_land_in_the_experiments_section_of_their_week(client, db):
    run_id = finished_run(db)
    failed_id = finished_run(db, "FAILED")
    assert posting.post_cards(db, "UTC") == [run_id, failed_id]
    assert posting.post_cards(db, "UTC") == []  # once only
    letter = client.get("/api/v1/weeks/2024-W13")
    body = letter.get_json()["letter"]["body"]
    assert body.index("## Experiments") < body.index(f"id: {run_id}") < body.index("## Reading")
    html = letter.get_json()["letter"]["html"]
    assert 'class="run-card run-succeeded"' in html and "<svg" in html and "DDP" in html
    assert "run-failed" in html
    revs = client.get(f"/api/v1/entries/{letter.get_json()['letter']['id']}/revisions")
    assert revs.get_json()["revisions"][0]["author"] == "scheduler"


def test_card_never_clobbers_the_owners_concurrent_edit(client, db):
    letter = client.get("/api/v1/weeks/2024-W13")
    assert letter.status_code == 404  # a past week: no letter yet
    run_id = finished_run(db)
    posting.post_cards(db, "UTC")
    entry = client.get("/api/v1/weeks/2024-W13").get_json()["letter"]
    # the owner opened the letter before the card arrived and saves from that stale base
    stale = client.put(f"/api/v1/entries/{entry['id']}", json={
        "body": "my words", "base_revision": entry["revision"] - 1})
    assert stale.status_code == 409 and f"id: {run_id}" in stale.get_json()["error"][
        "current"]["body"]
    # and the card is appended after the owner's fresh save
    client.put(f"/api/v1/entries/{entry['id']}", json={
        "body": entry["body"] + "\n\nnotes typed meanwhile", "base_revision": entry["revision"]})
    second = finished_run(db)
    posting.post_cards(db, "UTC")
    body = client.get("/api/v1/weeks/2024-W13").get_json()["letter"]["body"]
    assert "notes typed meanwhile" in body and f"id: {second}" in body


def test_run_embed_in_any_entry_and_bad_embeds(client, db):
    run_id = finished_run(db)
    r = client.post("/api/v1/entries", json={
        "title": "Look", "body": f"```run\nid: {run_id}\n```\n\n```run\nid: 999\n```\n\n"
                                 "```run\nnonsense\n```"})
    html = r.get_json()["html"]
    assert f'href="/runs/{run_id}"' in html
    assert "there is no run 999" in html and 'a run block needs a line' in html


def test_a_hand_written_embed_of_an_unfinished_run_shows_its_final_card(client, db):
    with db.write() as session:
        run = runs.create(session, "data_parallel", SMALL, actor="t")
    entry = client.post("/api/v1/entries", json={
        "title": "Watching", "body": f"Started this:\n\n```run\nid: {run.id}\n```"}).get_json()
    assert "run-queued" in entry["html"]
    with db.write() as session:
        finished = session.get(Run, run.id)
        finished.status, finished.finished_at = "FAILED", dt.datetime(2024, 3, 27, 12)
        finished.reason = "boom"
    posting.post_cards(db, "UTC")
    after = client.get(f"/api/v1/entries/{entry['id']}").get_json()
    assert "run-failed" in after["html"] and "boom" in after["html"]
    assert after["revision"] == entry["revision"]  # derived HTML, not a new revision


def test_a_run_can_require_a_gpu_model(runner, client, db):
    r = client.post("/api/v1/runs", json={"experiment": "gemm_roofline",
                                          "requires": {"gpu_model": "H200"}})
    assert r.status_code == 201 and r.get_json()["requires"] == {"gpu_model": "H200"}
    assert lease(runner).status_code == 204  # this runner has no H200
    with db.write() as session:
        session.add(Token(name="h200", role="runner", token_hash=hash_token("cp_h200")))
    h200 = {"Authorization": "Bearer cp_h200"}
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
