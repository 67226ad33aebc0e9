"""What a misbehaving (or hostile) runner can send is refused at the door with a 4xx, and
nothing it sends can break a page or the JSON API afterwards: NaN and Infinity, wrong
types in the fields the pages read, metric steps beyond 64 bits, and more stored data per
run than a run may keep."""

import json

import pytest

from app.journal import run_files, runs
from app.models import Metric, Run, RunArtifact
from tests.helpers import SMALL, add_token, bearer, count, load


@pytest.fixture
def leased(app, db):
    """(client, headers, run id, epoch): a run leased to a registered runner."""
    headers = bearer(add_token(db, "r1", "runner"))
    client = app.test_client()
    client.post("/api/v1/runner/register", json={"labels": {}}, headers=headers)
    run = client.post("/api/v1/runs", json={"experiment": "data_parallel", "params": SMALL})
    lease = client.post("/api/v1/runner/lease", json={"wait": 0}, headers=headers).get_json()
    assert lease["run"]["id"] == run.get_json()["id"]
    return client, headers, lease["run"]["id"], lease["run"]["epoch"]


def raw(leased, what: str, text: str):
    client, headers, run_id, _ = leased
    return client.post(f"/api/v1/runner/runs/{run_id}/{what}", data=text,
                       headers={**headers, "Content-Type": "application/json"})


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e999",
                                    "123456789012345678901234"])
def test_numbers_json_cannot_carry_are_refused(leased, db, number):
    epoch = leased[3]
    r = raw(leased, "result", f'{{"epoch": {epoch}, "result": {{"x": {number}}}}}')
    assert r.status_code == 422
    r = raw(leased, "metrics", f'{{"epoch": {epoch}, "points": '
                               f'[{{"key": "k", "step": 1, "value": {number}}}]}}')
    assert r.status_code == 422
    assert load(db, Run, leased[2]).result is None and count(db, Metric) == 0


DEEP: list = [1]
for _ in range(25):
    DEEP = [DEEP]


@pytest.mark.parametrize("result, field", [
    ({"strategies": [{"step_time_s": {"median": "abc"}}]},
     "result.strategies[0].step_time_s.median"),
    ({"strategies": [{"prediction": "fast"}]}, "result.strategies[0].prediction"),
    ({"strategies": {"a": 1}}, "result.strategies"),
    ({"strategies": [{"correctness": {"passed": "yes"}}]},
     "result.strategies[0].correctness.passed"),
    ({"fits": {"all_reduce": {"busbw_Bps": "1 GB/s"}}}, "result.fits.all_reduce.busbw_Bps"),
    ({"fits": {"all_reduce": {"fallback": True}}}, "result.fits.all_reduce.fallback"),
    ({"table": [{"op": 5}]}, "result.table[0].op"),
    ({"peak_flops": True}, "result.peak_flops"),
    ({"reason": 5}, "result.reason"),
    ({"x": DEEP}, "result"),
])
def test_results_the_pages_cannot_read_are_refused(leased, db, client, result, field):
    _, headers, run_id, epoch = leased
    r = leased[0].post(f"/api/v1/runner/runs/{run_id}/result",
                       json={"epoch": epoch, "result": result}, headers=headers)
    assert r.status_code == 422 and r.get_json()["error"]["field"] == field
    assert load(db, Run, run_id).result is None
    assert client.get(f"/runs/{run_id}").status_code == 200
    assert client.get(f"/api/v1/runs/{run_id}").status_code == 200


def test_a_result_with_unknown_fields_is_kept(leased, db):
    _, headers, run_id, epoch = leased
    result = {"strategies": [{"strategy": "ddp", "step_time_s": {"median": 0.1},
                              "something_new": {"deep": [1, 2.5, None, "x"]}}]}
    r = leased[0].post(f"/api/v1/runner/runs/{run_id}/result",
                       json={"epoch": epoch, "result": result}, headers=headers)
    assert r.status_code == 200 and load(db, Run, run_id).result == result


@pytest.mark.parametrize("point", [{"key": "k", "step": -1, "value": 1},
                                   {"key": "k", "step": 1.5, "value": 1},
                                   {"key": "", "step": 1, "value": 1},
                                   {"key": "k", "step": 1, "value": "1"},
                                   {"key": "k" * 101, "step": 1, "value": 1}])
def test_bad_metric_points_are_refused(leased, db, point):
    _, headers, run_id, epoch = leased
    r = leased[0].post(f"/api/v1/runner/runs/{run_id}/metrics",
                       json={"epoch": epoch, "points": [point]}, headers=headers)
    assert r.status_code == 422 and count(db, Metric) == 0


def test_a_run_keeps_bounded_metrics_and_artifacts(leased, db, monkeypatch):
    client, headers, run_id, epoch = leased
    monkeypatch.setattr(runs, "MAX_RUN_METRICS", 3)
    monkeypatch.setattr(run_files, "MAX_ARTIFACTS", 2)
    monkeypatch.setattr(run_files, "MAX_ARTIFACT_BYTES", 10)
    points = [{"key": "k", "step": i, "value": 1.0} for i in range(3)]
    url = f"/api/v1/runner/runs/{run_id}"
    assert client.post(url + "/metrics", json={"epoch": epoch, "points": points},
                       headers=headers).status_code == 200
    more = client.post(url + "/metrics", json={"epoch": epoch, "points": points[:1]},
                       headers=headers)
    assert more.status_code == 413 and count(db, Metric) == 3

    def put(name, body):
        return client.put(f"{url}/artifacts/{name}?epoch={epoch}", data=body, headers=headers)

    assert put("a.txt", b"12345").status_code == 200
    assert put("a.txt", b"1234567").status_code == 200  # replacing counts once
    assert put("b.txt", b"1234").status_code == 413  # 7 + 4 > 10 bytes
    assert put("b.txt", b"12").status_code == 200
    assert put("c.txt", b"1").status_code == 413  # a third artifact
    assert count(db, RunArtifact) == 2
    assert json.loads(client.get(f"/api/v1/runs/{run_id}").data)["artifacts"]
