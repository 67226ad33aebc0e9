"""GET /api/v1/runs/<id>/trace.json: a real run's events as a Chrome Trace Event file that
Perfetto and chrome://tracing open. The file is checked against the format's rules (and
the viewers' needs): X slices with ts and dur ≥ 0 that nest on every (pid, tid) track,
one process per rank with its name, named threads, and every flow start with exactly one
end, no earlier, bound inside a slice on each side. Runs without events, unknown runs and
a hostile events file get a clear answer, never a 500."""

from __future__ import annotations

import json
import shutil
from collections import defaultdict

import pytest

from app.journal import runs
from app.journal.views import rank_events
from app.journal.views.trace import assign_tracks
from tests.real_runs import lab_output, store_run

EPS = 1e-6  # µs: ts and dur are whole nanoseconds divided by 1000


@pytest.fixture(scope="module")
def pipeline_out(tmp_path_factory):
    return lab_output(tmp_path_factory, "pipeline")


@pytest.fixture(scope="module")
def zero_out(tmp_path_factory):
    return lab_output(tmp_path_factory, "zero")


def lines_of(out) -> list[dict]:
    return [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()
            if line.strip()]


def check_trace(body: dict) -> dict:
    """Assert the Trace Event format's rules; returns a few facts for further checks."""
    assert body["displayTimeUnit"] == "ms"
    events = body["traceEvents"]
    assert isinstance(events, list) and events
    slices = defaultdict(list)
    names, threads, flows = {}, set(), defaultdict(list)
    for e in events:
        assert e["ph"] in ("X", "M", "s", "f"), e
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int)
        if e["ph"] == "X":
            assert isinstance(e["name"], str) and e["name"]
            assert e["ts"] >= 0 and e["dur"] >= 0, e
            slices[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
        elif e["ph"] == "M":
            if e["name"] == "process_name":
                names[e["pid"]] = e["args"]["name"]
            elif e["name"] == "thread_name":
                threads.add((e["pid"], e["tid"]))
                assert e["args"]["name"]
        else:
            flows[e["id"]].append(e)
    for track, spans in slices.items():
        stack: list[float] = []
        for start, end in sorted(spans, key=lambda s: (s[0], -s[1])):
            while stack and stack[-1] <= start + EPS:
                stack.pop()
            assert not stack or end <= stack[-1] + EPS, f"slices overlap on {track}"
            stack.append(end)
    pids = {pid for pid, _ in slices}
    assert set(names) == pids and all(names[p] == f"rank {p}" for p in pids)
    assert set(slices) <= threads

    def inside(flow) -> bool:
        return any(a - EPS <= flow["ts"] <= b + EPS for a, b in slices[(flow["pid"], flow["tid"])])

    for flow_id, pair in flows.items():
        phases = sorted(f["ph"] for f in pair)
        assert phases == ["f", "s"], f"flow {flow_id}: {phases}"
        start, end = (next(f for f in pair if f["ph"] == ph) for ph in ("s", "f"))
        assert end["ts"] >= start["ts"] and end["bp"] == "e"
        assert start["name"] == end["name"] and start["cat"] == end["cat"]
        assert inside(start) and inside(end)
    return {"pids": pids, "flows": len(flows), "slices": sum(map(len, slices.values()))}


def test_a_real_pipeline_run_gives_a_valid_trace(app, client, pipeline_out):
    run_id = store_run(app, "pipeline", pipeline_out)
    response = client.get(f"/api/v1/runs/{run_id}/trace.json")
    assert response.status_code == 200
    assert response.mimetype == "application/json"
    assert "attachment" in response.headers["Content-Disposition"]
    body = response.get_json()
    facts = check_trace(body)
    logged = lines_of(pipeline_out)
    assert facts["pids"] == {e["rank"] for e in logged}
    assert facts["slices"] == len(logged)  # every event, none lost to a full track
    sends = [e for e in logged if e["kind"] == "send"]
    assert sends and facts["flows"] == len(sends)  # every send found its receive
    assert body["otherData"]["run_id"] == run_id
    assert body["otherData"]["experiment"] == "pipeline"
    assert body["otherData"]["params"]["micro_batches"] == 4
    forward = next(e for e in body["traceEvents"] if e["ph"] == "X" and
                   e["args"]["kind"] == "forward")
    assert forward["name"] == f"F{forward['args']['mb']}"


def test_a_real_zero_run_gives_a_valid_trace(app, client, zero_out):
    """ZeRO's and DDP's asynchronous collectives overlap: they get tracks of their own."""
    run_id = store_run(app, "zero", zero_out)
    body = client.get(f"/api/v1/runs/{run_id}/trace.json").get_json()
    facts = check_trace(body)
    assert facts["flows"] == 0
    comm_tracks = {(e["pid"], e["tid"]) for e in body["traceEvents"]
                   if e["ph"] == "X" and e["args"]["kind"] in rank_events.COLLECTIVES}
    assert comm_tracks
    assert facts["slices"] == len(lines_of(zero_out))


def test_no_trace_for_an_unknown_run_or_one_without_events(app, client):
    unknown = client.get("/api/v1/runs/987654/trace.json")
    assert unknown.status_code == 404 and unknown.get_json()["error"]["code"] == "not_found"
    with app.extensions["db"].write() as session:
        run = runs.create(session, "pipeline", {}, actor="test")
        session.flush()
        run_id = run.id
    bare = client.get(f"/api/v1/runs/{run_id}/trace.json")
    assert bare.status_code == 404 and "no events" in bare.get_json()["error"]["message"]
    assert client.get("/api/v1/runs/0/trace.json").status_code == 404
    assert client.get("/api/v1/runs/abc/trace.json").status_code == 404


HOSTILE = [
    "not json at all", "[1, 2, 3]", '"a string"', "{}", "null",
    '{"rank": "0", "strategy": "x", "step": 0, "kind": "forward", "t0": 1, "t1": 2}',
    '{"rank": true, "strategy": "x", "step": 0, "kind": "forward", "t0": 1, "t1": 2}',
    '{"rank": -1, "strategy": "x", "step": 0, "kind": "forward", "t0": 1, "t1": 2}',
    '{"rank": 0, "strategy": "x", "step": 0, "kind": "forward", "t0": NaN, "t1": 2}',
    '{"rank": 0, "strategy": "x", "step": 0, "kind": "forward", "t0": 3, "t1": 2}',
    '{"rank": 0, "strategy": "x", "step": 0, "kind": "forward", "t0": 1e300, "t1": 1e301}',
    '{"rank": 0, "strategy": "<script>alert(1)</script>", "step": 0, "kind": "forward", '
    '"t0": 1, "t1": 2}',
    '{"rank": 0, "strategy": "' + "s" * 500 + '", "step": 0, "kind": "forward", "t0": 1, "t1": 2}',
    '{"rank": 0, "strategy": "x", "step": {"a": 1}, "kind": "forward", "t0": 1, "t1": 2}',
    '{"rank": 99999999, "strategy": "x", "step": 0, "kind": "send", "t0": 1, "t1": 2}',
    "[" * 2000 + "]" * 2000,
    '{"rank": 0, "strategy": "x", "step": 0, "kind": "' + "k" * 100 + '", "t0": 1, "t1": 2}',
]


def hostile_lines(real: list[str]) -> list[str]:
    """A few real lines, every kind of junk, odd-but-valid events (a send to itself, a
    receive with no send, optional fields of the wrong type) and a pile of overlapping
    collectives, more than a rank gets tracks for."""
    odd = [
        {"rank": 0, "strategy": "x", "step": 0, "kind": "step", "t0": 0.5, "t1": 9.0},
        {"rank": 0, "strategy": "x", "step": 0, "kind": "send", "t0": 1, "t1": 2, "peer": 0,
         "bytes": 10},
        {"rank": 1, "strategy": "x", "step": 0, "kind": "recv", "t0": 1, "t1": 2, "peer": 0,
         "bytes": "lots", "mb": -3, "dir": {"no": 1}},
        {"rank": 0, "strategy": "x", "step": 0, "kind": "forward", "t0": 1, "t1": 3,
         "mb": 1.5, "stage": "zero"},
        {"rank": 0, "strategy": "x", "step": 0, "kind": "forward", "t0": 2, "t1": 4, "mb": 2},
    ]
    piles = [{"rank": 1, "strategy": "x", "step": 0, "kind": "all_reduce", "t0": 1 + i / 1e4,
              "t1": 5, "bytes": 8, "asynchronous": True} for i in range(100)]
    return real[:40] + HOSTILE + [json.dumps(e) for e in odd + piles]


def test_a_hostile_events_file_gives_a_valid_trace_and_a_page(app, client, pipeline_out,
                                                              tmp_path):
    out = tmp_path / "hostile"
    out.mkdir()
    shutil.copy(pipeline_out / "result.json", out / "result.json")
    real = (pipeline_out / "events.jsonl").read_text().splitlines()
    text = "\n".join(hostile_lines(real)) + "\n"
    (out / "events.jsonl").write_bytes(text.encode() + b"\xff\xfe garbage \x00\n")
    run_id = store_run(app, "pipeline", out)

    response = client.get(f"/api/v1/runs/{run_id}/trace.json")
    assert response.status_code == 200
    body = response.get_json()
    check_trace(body)
    assert body["otherData"]["skipped_lines"] == len(HOSTILE) + 1
    page = client.get(f"/runs/{run_id}?tl_strategy=x")
    assert page.status_code == 200
    assert b"<script>alert(1)" not in page.data
    assert b"could not be read" in page.data


def test_a_file_of_nothing_but_junk_has_no_trace(app, client, pipeline_out, tmp_path):
    out = tmp_path / "junk"
    out.mkdir()
    shutil.copy(pipeline_out / "result.json", out / "result.json")
    (out / "events.jsonl").write_text("\n".join(HOSTILE) + "\n")
    run_id = store_run(app, "pipeline", out)
    assert client.get(f"/api/v1/runs/{run_id}/trace.json").status_code == 404
    page = client.get(f"/runs/{run_id}")
    assert page.status_code == 200 and b'id="timeline"' not in page.data


def test_tracks_are_shared_only_by_spans_that_do_not_overlap():
    assert assign_tracks([(0, 10), (10, 20), (5, 15), (12, 13)]) == [0, 0, 1, 2]
    assert assign_tracks([(0, 10)] * 3, limit=2) == [0, 1, None]


def test_a_runs_views_are_made_once_per_version_of_its_events(app, client, pipeline_out):
    """The trace file and the run page's timeline are built from the events once, then
    served from the parsed file's cache while the file is unchanged: a big events file
    costs its parse and its views once, not on every view."""
    run_id = store_run(app, "pipeline", pipeline_out)
    first = client.get(f"/api/v1/runs/{run_id}/trace.json")
    page = client.get(f"/runs/{run_id}")
    assert first.status_code == 200 and page.status_code == 200
    with app.extensions["db"].read() as session:
        found = rank_events.run_events(app.config["DATA_DIR"], session, run_id)
    made = dict(found._derived)
    assert {key[0] for key in made} == {"trace.json", "rank_views"}
    again = client.get(f"/api/v1/runs/{run_id}/trace.json")
    assert again.data == first.data
    assert client.get(f"/runs/{run_id}").text == page.text
    assert found._derived.keys() == made.keys()  # nothing was made again
    assert all(found._derived[key] is value for key, value in made.items())
