"""A run no registered runner can take is answered at submit, not left to expire a day
later: the form and the API refuse it (unless the owner insists: then the API says why it
will wait), and the run page says so while it waits. An idle runner is seen without
committing on every poll."""

import datetime as dt
import sqlite3
import time
from concurrent.futures import ThreadPoolExecutor

from app.journal import runners
from app.models import Run, Runner
from tests.helpers import add_token, bearer, count, form_for, load

CPU = {"gpu_count": 0, "host": "laptop"}


def register(client, db, name, labels):
    token = add_token(db, name, "runner")
    r = client.post("/api/v1/runner/register", json={"labels": labels}, headers=bearer(token))
    assert r.status_code == 200


def test_the_form_refuses_a_gpu_run_when_only_cpu_runners_are_registered(client, db):
    register(client, db, "laptop", CPU)
    form = form_for("data_parallel", device="cuda", world_size="2")
    response = client.post("/experiments/data_parallel/run", data=form)
    assert response.status_code == 422
    assert "no registered runner has 2 GPUs (laptop has 0 GPUs)" in response.text
    assert 'name="queue_anyway"' in response.text
    assert count(db, Run) == 0
    insisted = client.post("/experiments/data_parallel/run", data={**form, "queue_anyway": "on"})
    assert insisted.status_code == 303 and count(db, Run) == 1
    page = client.get(insisted.headers["Location"]).text
    assert "Waiting: no registered runner has 2 GPUs" in page


def test_the_api_refuses_it_as_the_form_does_unless_told_to_queue_it(client, db):
    register(client, db, "laptop", CPU)
    cuda = {"experiment": "gemm_roofline", "params": {"device": "cuda"}}
    refused = client.post("/api/v1/runs", json=cuda)
    assert refused.status_code == 422 and count(db, Run) == 0
    error = refused.get_json()["error"]
    assert error["field"] == "requires" and "queue_anyway" in error["message"]
    assert "no registered runner has 1 GPU" in error["message"]
    bad = client.post("/api/v1/runs", json={**cuda, "queue_anyway": "yes"})
    assert bad.status_code == 422 and count(db, Run) == 0
    r = client.post("/api/v1/runs", json={**cuda, "queue_anyway": True})
    assert r.status_code == 201
    assert r.get_json()["waiting"].startswith("no registered runner has 1 GPU")
    ok = client.post("/api/v1/runs", json={"experiment": "gemm_roofline",
                                           "params": {"device": "cpu"}}).get_json()
    assert ok["waiting"] == ""  # the laptop takes it


def test_a_runner_that_can_take_it_but_was_not_seen_lately_is_named(client, db):
    register(client, db, "gpu-box", {"gpu_count": 8, "gpu_model": "NVIDIA H200"})
    with db.write() as session:
        box = session.query(Runner).one()
        box.last_seen_at = box.last_seen_at - dt.timedelta(days=3)
    run = client.post("/api/v1/runs", json={"experiment": "gemm_roofline",
                                            "params": {"device": "cuda"},
                                            "requires": {"gpu_model": "H200"}}).get_json()
    assert run["waiting"] == "the last runner that can take it (gpu-box) was seen 3 days ago"
    assert load(db, Run, run["id"]).status == "QUEUED"


def test_no_runner_at_all_is_a_wait_not_a_refusal(client, db):
    response = client.post("/experiments/gemm_roofline/run", data=form_for("gemm_roofline"))
    assert response.status_code == 303
    with db.read() as session:
        servable, why = runners.availability(session, {})
    assert servable and "no runner has registered yet" in why


def test_an_idle_runners_long_poll_commits_once_per_seen_resolution(client, db):
    """Each attempt of a long poll (every half second) used to stamp last_seen_at: an idle
    runner committed twice a second, all day. Now a poll commits only when the stamp is
    older than SEEN_RESOLUTION, and the stamp stays that fresh."""
    token = add_token(db, "laptop", "runner")
    assert client.post("/api/v1/runner/register", json={"labels": CPU},
                       headers=bearer(token)).status_code == 200
    watcher = sqlite3.connect(db.sqlite_path)  # PRAGMA data_version: another connection's

    def commits_during(wait: float) -> int:
        """Commits seen while one long poll waits, looked for every 50 ms (an attempt is
        every 500 ms, so each commit is seen on its own)."""
        version = watcher.execute("PRAGMA data_version").fetchone()[0]
        seen = 0
        with ThreadPoolExecutor(1) as pool:
            polling = pool.submit(client.post, "/api/v1/runner/lease", json={"wait": wait},
                                  headers=bearer(token))
            while True:
                finished = polling.done()
                now = watcher.execute("PRAGMA data_version").fetchone()[0]
                seen, version = seen + (now != version), now
                if finished:
                    break
                time.sleep(0.05)
        assert polling.result().status_code == 204
        return seen

    assert commits_during(1.6) == 0  # four attempts, just registered: nothing
    with db.write() as session:
        laptop = session.query(Runner).one()
        laptop.last_seen_at -= runners.SEEN_RESOLUTION
    assert commits_during(1.6) == 1  # the first attempt stamps, the others do not
    seen = load(db, Runner, laptop.id).last_seen_at
    assert dt.datetime.now(dt.UTC).replace(tzinfo=None) - seen < dt.timedelta(seconds=5)
    watcher.close()
