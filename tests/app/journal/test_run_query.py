"""Runs you can query (issue 14): the run list's parameter filters and sorts by a scalar
result, on the API and the page, keyset paging, what a result's numbers become
(app/journal/run_metrics.py), bounded whatever a runner sends, every bad argument a 4xx
naming it, and the migration that indexes the runs already there.

Results here are small hand-made payloads in the lab's shape; the 10,000-run timing is
bench/runs.py.
"""

from __future__ import annotations

import html
import json
import re

import pytest
import sqlalchemy as sa
from alembic import command

from app import db as dbmod
from app import upgrades
from app.journal import run_metrics, runs
from app.models import Run, RunMetric, Runner, RunParam
from app.web.pages.runs import PAGE
from tests.helpers import count, parse
from tests.strict_pages import assert_strict_page


def strategy(name: str, step: float, *, mfu: float = 0.1, passed: bool = True,
             bubble: float | None = None, peaks=(1000, 2000)) -> dict:
    s = {"strategy": name, "label": name, "tokens_per_s": 256 / step,
         "step_time_s": {"median": step, "p10": step, "p90": step},
         "mfu": {"value": mfu}, "correctness": {"passed": passed},
         "memory": [{"rank": r, "peak": {"measured": p}} for r, p in enumerate(peaks)]}
    if bubble is not None:
        s["bubble"] = {"measured_idle_fraction": bubble}
    return s


def training(*strategies: dict) -> dict:
    return {"status": "succeeded", "duration_s": 12.5, "strategies": list(strategies)}


def make(db, experiment: str = "pipeline", result: dict | None = None, **params) -> int:
    """A run through the product's own functions; finished when it has a result."""
    with db.write() as session:
        run = runs.create(session, experiment, {"steps": 1, "warmup": 0, **params},
                          actor="test")
        if result is not None:
            runs.transition(session, run, runs.LEASED, actor="runner:test")
            runs.transition(session, run, runs.RUNNING, actor="runner:test")
            runs.store_result(session, run, result)
            runs.transition(session, run, runs.SUCCEEDED, actor="runner:test")
        return run.id


def ids(response) -> list[int]:
    assert response.status_code == 200, response.get_json()
    return [r["id"] for r in response.get_json()["runs"]]


# -- what a result's numbers become -------------------------------------------------------


def test_a_training_result_gives_per_strategy_numbers_and_the_best_correct_one():
    found = run_metrics.derive(training(
        strategy("single", 0.001, mfu=0.9, peaks=(10,)),  # the reference: never the headline
        strategy("gpipe", 0.030, mfu=0.20, bubble=0.5, peaks=(3000, 3500)),
        strategy("1f1b", 0.020, mfu=0.25, bubble=0.4, peaks=(2500, 2100)),
        strategy("broken", 0.005, mfu=0.8, bubble=0.1, passed=False)))  # fast but wrong
    assert found["1f1b.step_time_s"] == 0.020 and found["gpipe.bubble"] == 0.5
    assert found["1f1b.peak_memory_bytes"] == 2500  # the largest rank's peak
    assert found["single.step_time_s"] == 0.001 and found["broken.mfu"] == 0.8
    assert found["step_time_s"] == 0.020 and found["mfu"] == 0.25  # best correct candidate
    assert found["bubble"] == 0.4 and found["peak_memory_bytes"] == 2500
    assert found["tokens_per_s"] == pytest.approx(256 / 0.020)
    assert found["duration_s"] == 12.5


def test_collectives_and_single_number_results():
    sweep = run_metrics.derive({"fits": {
        "all_reduce": {"alpha_s": 1e-4, "busbw_Bps": 5e9},
        "all_gather": {"alpha_s": 2e-4, "busbw_Bps": 7e9}}})
    assert sweep["all_reduce.busbw_Bps"] == 5e9 and sweep["busbw_Bps"] == 7e9
    assert sweep["alpha_s"] == 1e-4
    mfu = run_metrics.derive({"step_time_s": {"median": 0.04}, "tokens_per_s": 2764.9,
                              "mfu": 0.28, "peak_flops": 1.3e10})
    assert mfu == {"step_time_s": 0.04, "tokens_per_s": 2764.9, "mfu": 0.28,
                   "peak_flops": 1.3e10}
    assert run_metrics.derive(None) == {} and run_metrics.derive([1]) == {}


def test_a_result_is_shown_in_its_own_unit():
    # tokens_per_s ends in "_s" like a time, but is a rate
    assert run_metrics.shown("tokens_per_s", 9270.0) == "9.27 ktok/s"
    assert run_metrics.shown("ddp.tokens_per_s", 950.0) == "950 tok/s"
    assert run_metrics.shown("step_time_s", 0.00691) == "6.91 ms"
    assert run_metrics.shown("alpha_s", 2e-5) == "20 µs"
    assert run_metrics.shown("mfu", 0.02) == run_metrics.percent(0.02)


def test_a_hostile_result_makes_a_bounded_number_of_rows(db):
    hostile = training(*[strategy(f"s{i}", 0.01 + i) for i in range(5000)])
    hostile["strategies"][:0] = [strategy("x" * 500, 0.001), strategy("bad name/..", 0.001)]
    hostile["strategies"][2]["bubble"] = {"measured_idle_fraction": True}  # not a number
    hostile["fits"] = {f"op{i}": {"busbw_Bps": 1.0} for i in range(5000)}
    run_id = make(db, result=hostile)
    rows = count(db, RunMetric, RunMetric.run_id == run_id)
    assert 0 < rows <= run_metrics.MAX_ROWS
    with db.read() as session:
        keys = set(session.scalars(sa.select(RunMetric.key).where(RunMetric.run_id == run_id)))
    assert "s0.step_time_s" in keys and "s0.bubble" not in keys
    assert not any(k.startswith(("x" * 41, "bad")) for k in keys)
    assert "s20.step_time_s" not in keys  # only the first MAX_GROUPS strategies count
    # what the result check would refuse anyway is skipped here too
    assert run_metrics.derive({"strategies": [{"strategy": 7}, "not an object", None],
                               "fits": {"op": "x", "": {"busbw_Bps": 1.0}}}) == {}


def test_a_result_sent_again_replaces_its_numbers(db):
    run_id = make(db, result=training(strategy("1f1b", 0.02)))
    with db.write() as session:
        run = session.get(Run, run_id)
        runs.store_result(session, run, training(strategy("gpipe", 0.03)))
    with db.read() as session:
        keys = set(session.scalars(sa.select(RunMetric.key).where(RunMetric.run_id == run_id)))
    assert "gpipe.step_time_s" in keys and "1f1b.step_time_s" not in keys


def test_parameters_are_indexed_when_the_run_is_made(db):
    run_id = make(db, "zero", bucket_cap_mb=0.5, strategies=["ddp", "zero1"])
    with db.read() as session:
        rows = set(session.execute(sa.select(RunParam.key, RunParam.value)
                                   .where(RunParam.run_id == run_id)))
    assert {("strategies", "ddp"), ("strategies", "zero1"), ("bucket_cap_mb", "0.5"),
            ("world_size", "2"), ("device", "auto")} <= rows
    assert run_metrics.param_text(True) == "true" and run_metrics.param_text(2.0) == "2"
    assert run_metrics.param_text(None) is None and run_metrics.param_text({"a": 1}) is None


# -- filters ------------------------------------------------------------------------------


def test_filter_by_any_parameter(client, db):
    mb8 = make(db, micro_batches=8, strategies=["gpipe", "1f1b"])
    mb4 = make(db, micro_batches=4, strategies=["1f1b"])
    gp = make(db, micro_batches=8, strategies=["gpipe"])
    zero = make(db, "zero", bucket_cap_mb=0.25)
    assert ids(client.get("/api/v1/runs?param.micro_batches=8")) == [gp, mb8]
    assert ids(client.get("/api/v1/runs?param.strategies=1f1b")) == [mb4, mb8]  # holds it
    assert ids(client.get("/api/v1/runs?param.strategies=1f1b&param.strategies=gpipe")) \
        == [mb8]
    assert ids(client.get("/api/v1/runs?param.micro_batches=8&param.strategies=1f1b")) \
        == [mb8]
    assert ids(client.get("/api/v1/runs?params=micro_batches%3D8+strategies%3Dgpipe")) \
        == [gp, mb8]  # the page's text box
    assert ids(client.get("/api/v1/runs?param.bucket_cap_mb=0.250")) == [zero]  # one form
    assert ids(client.get("/api/v1/runs?param.micro_batches=8&experiment=zero")) == []
    assert ids(client.get("/api/v1/runs?param.no_such_thing=1")) == []  # matches nothing
    assert ids(client.get("/api/v1/runs?param.micro_batches=")) == [zero, gp, mb4, mb8]


def test_filters_and_sort_on_the_page_without_script(client, db):
    slow = make(db, micro_batches=8, result=training(strategy("1f1b", 0.040, mfu=0.31)))
    fast = make(db, micro_batches=8, result=training(strategy("1f1b", 0.010, mfu=0.12)))
    make(db, micro_batches=4, result=training(strategy("1f1b", 0.005)))
    make(db, micro_batches=8)  # queued: no result, so not in a sorted list
    response = client.get("/runs?params=micro_batches%3D8&sort=mfu")
    assert response.status_code == 200
    assert_strict_page(response)
    page = parse(response.text)
    assert [i["value"] for i in page.inputs["ids"]] == [str(slow), str(fast)]  # best first
    assert "31%" in response.text and "12%" in response.text and ">MFU</th>" in response.text
    assert page.inputs["params"][0]["value"] == "micro_batches=8"
    assert any(f.get("method") == "get" for f in page.forms)
    named = client.get("/runs?param.micro_batches=8&sort=1f1b.step_time_s&order=desc")
    assert [i["value"] for i in parse(named.text).inputs["ids"]] == [str(slow), str(fast)]
    assert 'name="param.micro_batches" value="8"' in named.text  # kept by the form
    assert "1f1b.step_time_s" in named.text


# -- sorts and paging ---------------------------------------------------------------------


def test_sort_by_a_result_best_first_and_either_way(client, db):
    a = make(db, result=training(strategy("1f1b", 0.03, mfu=0.2, bubble=0.5)))
    b = make(db, result=training(strategy("1f1b", 0.01, mfu=0.4, bubble=0.2)))
    c = make(db, result=training(strategy("gpipe", 0.02, mfu=0.3)))
    make(db)  # no result
    got = client.get("/api/v1/runs?sort=step_time_s").get_json()
    assert [r["id"] for r in got["runs"]] == [b, c, a]  # lower is better: ascending
    assert got["sort"] == "step_time_s" and got["order"] == "asc"
    assert [r["sort_value"] for r in got["runs"]] == [0.01, 0.02, 0.03]
    assert ids(client.get("/api/v1/runs?sort=mfu")) == [b, c, a]  # higher is better
    assert ids(client.get("/api/v1/runs?sort=mfu&order=asc")) == [a, c, b]
    assert ids(client.get("/api/v1/runs?sort=1f1b.bubble")) == [b, a]  # only 1f1b runs
    assert ids(client.get("/api/v1/runs?sort=step_time_s&status=queued")) == []
    assert ids(client.get("/api/v1/runs?sort=zero3.mfu")) == []  # nobody ran it
    mine = make(db, result=training(strategy("mine", 0.05)))  # an own experiment's
    assert ids(client.get("/api/v1/runs?sort=mine.step_time_s")) == [mine]


def test_keyset_paging_through_a_sorted_list_with_ties(client, db):
    made = [make(db, result=training(strategy("1f1b", 0.01 * (i % 3 + 1)))) for i in range(7)]
    expected = sorted(made, key=lambda i: (0.01 * ((i - made[0]) % 3 + 1), i))
    seen, url = [], "/api/v1/runs?sort=step_time_s&limit=2"
    while True:
        got = client.get(url).get_json()
        seen += [r["id"] for r in got["runs"]]
        if not got["has_more"]:
            assert got["next_cursor"] is None
            break
        url = f"/api/v1/runs?sort=step_time_s&limit=2&cursor={got['next_cursor']}"
    assert seen == expected
    # offset paging still works, and the newest-first list pages by run id
    assert ids(client.get("/api/v1/runs?sort=step_time_s&limit=3&offset=3")) == expected[3:6]
    first = client.get("/api/v1/runs?limit=4").get_json()
    assert first["next_cursor"] == str(made[3])
    assert ids(client.get(f"/api/v1/runs?limit=4&cursor={first['next_cursor']}")) \
        == made[2::-1]
    assert ids(client.get(f"/api/v1/runs?limit=4&before={made[3]}")) == made[2::-1]


def test_the_page_pages_a_sorted_list(client, db):
    with db.write() as session:  # one page and one more run, in one transaction
        made = []
        for i in range(PAGE + 1):
            run = runs.create(session, "pipeline", {"steps": 1}, actor="test")
            runs.store_result(session, run, training(strategy("1f1b", 0.001 * (i + 1))))
            made.append(run.id)
    page = client.get("/runs?sort=step_time_s")
    assert len(parse(page.text).inputs["ids"]) == PAGE
    links = re.findall(r'href="([^"]*cursor=[^"]*)"', page.text)
    assert len(links) == 1
    second = client.get(html.unescape(links[0]))
    assert [i["value"] for i in parse(second.text).inputs["ids"]] == [str(made[-1])]
    assert "First</a>" in second.text and "cursor=" not in second.text.split("First")[1]


# -- refusals -----------------------------------------------------------------------------


@pytest.mark.parametrize("query, field", [
    ("sort=nope", "sort"), ("sort=1f1b.", "sort"), ("sort=a.b.mfu", "sort"),
    ("sort=%20.mfu", "sort"), ("order=up&sort=mfu", "order"), ("sort=nope.step_time_s", "sort"),
    ("sort=1f1x.bubble", "sort"),
    ("sort=mfu&cursor=abc", "cursor"), ("sort=mfu&cursor=nan,3", "cursor"),
    ("sort=mfu&cursor=0.1,x", "cursor"), ("sort=mfu&cursor=0.1," + "9" * 25, "cursor"),
    ("sort=mfu&cursor=inf,3", "cursor"), ("cursor=0.1,3", "cursor"),
    ("before=99999999999999999999", "before"), ("before=0", "before"),
    ("params=micro_batches", "params"), ("params=%3D8", "params"),
    ("param.bad-name!=1", "param.bad-name!"),
    ("&".join(f"param.p{i}=1" for i in range(9)), "params"),
    ("status=nope", "status"), ("schedule=" + "9" * 30, "schedule"),
    ("week=2024-W99", "week"), ("limit=0", "limit"), ("limit=x", "limit"),
    ("limit=-1", "limit"),
])
def test_bad_arguments_are_refused_naming_them(client, db, query, field):
    make(db, result=training(strategy("1f1b", 0.01)))
    before = count(db, Run), count(db, RunMetric), count(db, RunParam)
    response = client.get(f"/api/v1/runs?{query}")
    assert response.status_code == 422, response.get_json()
    assert response.get_json()["error"]["field"] == field
    page = client.get(f"/runs?{query}")
    assert page.status_code == 400 and "Can't filter like that" in page.text
    assert_strict_page(page)
    assert (count(db, Run), count(db, RunMetric), count(db, RunParam)) == before


def test_compare_takes_ten_runs(client, db):
    made = [make(db, result=training(strategy("1f1b", 0.01 * (i + 1)))) for i in range(11)]
    ten = ",".join(map(str, made[:10]))
    api = client.get(f"/api/v1/compare?ids={ten}")
    assert api.status_code == 200 and [r["id"] for r in api.get_json()["runs"]] == made[:10]
    assert api.get_json()["runs"][0]["events"][0]["to"] == "QUEUED"
    assert client.get(f"/runs/compare?ids={ten}").status_code == 200
    eleven = ",".join(map(str, made))
    assert client.get(f"/api/v1/compare?ids={eleven}").get_json()["error"]["field"] == "ids"
    assert client.get(f"/runs/compare?ids={eleven}").status_code == 422


# -- the migration ------------------------------------------------------------------------


def test_the_migration_indexes_the_runs_already_there(tmp_path):
    url = f"sqlite:///{tmp_path}/old.db"
    database = dbmod.Database(url)
    cfg = upgrades.alembic_config(url)
    with database.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0003")  # the schema before run_param and run_metric
        result = training(strategy("1f1b", 0.02, bubble=0.3))
        conn.execute(sa.text(
            "INSERT INTO run (id, experiment, params, requires, status, reason, reason_code, "
            "trigger, created_by, lease_epoch, created_at, progress_step, progress_total, "
            "progress, environment, result, log_size) VALUES (1, 'pipeline', :params, '{}', "
            "'SUCCEEDED', '', '', 'manual', 'me', 0, '2026-01-01 00:00:00', 0, 0, '{}', '{}', "
            ":result, 0)"), {"params": json.dumps({"micro_batches": 8,
                                                   "strategies": ["1f1b", "gpipe"]}),
                             "result": json.dumps(result)})
        conn.execute(sa.text(
            "INSERT INTO run (id, experiment, params, requires, status, reason, reason_code, "
            "trigger, created_by, lease_epoch, created_at, progress_step, progress_total, "
            "progress, environment, log_size) VALUES (2, 'zero', '{}', '{}', 'QUEUED', '', "
            "'', 'manual', 'me', 0, '2026-01-01 00:00:00', 0, 0, '{}', '{}', 0)"))
        command.upgrade(cfg, "0004")
        params = set(conn.execute(sa.text("SELECT run_id, key, value FROM run_param")))
        metrics = dict(conn.execute(sa.text(
            "SELECT key, value FROM run_metric WHERE run_id = 1")).all())
    assert params == {(1, "micro_batches", "8"), (1, "strategies", "1f1b"),
                      (1, "strategies", "gpipe")}
    assert metrics["1f1b.bubble"] == 0.3 and metrics["step_time_s"] == 0.02
    with database.engine.begin() as conn:  # and back down cleanly
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0003")
        names = {r[0] for r in conn.execute(sa.text("SELECT name FROM sqlite_master"))}
    assert "run_param" not in names and "run_metric" not in names


def test_a_list_of_runs_costs_the_same_statements_however_long(client, db):
    """The API's and the page's list load every column they show in one query: a column
    left out cost one more statement per run (run.nodes, found by bench/web.py)."""
    statements = [0]
    sa.event.listen(db.engine, "before_cursor_execute",
                    lambda *_: statements.__setitem__(0, statements[0] + 1))

    def counted(path: str) -> int:
        statements[0] = 0
        assert client.get(path).status_code == 200, path
        return statements[0]

    for _ in range(3):
        make(db, result=training(strategy("1f1b", 0.2)))
    few = {p: counted(p) for p in ("/api/v1/runs?limit=100", "/runs")}
    for _ in range(12):
        make(db, result=training(strategy("1f1b", 0.2)))
    assert {p: counted(p) for p in few} == few


def test_a_row_of_the_list_says_what_the_run_itself_says(client, db):
    """The list reads rows, not runs (app/journal/run_query.py): each row's summary in
    the API is the run's own, its runner's name included (one outer join, not a lookup
    per run), and a run no runner took has none."""
    taken, waiting = make(db, result=training(strategy("1f1b", 0.2))), make(db)
    with db.write() as session:
        runner = Runner(name="gpu-box", labels={})
        session.add(runner)
        session.flush()
        session.get(Run, taken).runner_id = runner.id
    listed = {r["id"]: r for r in client.get("/api/v1/runs?limit=10").get_json()["runs"]}
    for run_id, name in ((taken, "gpu-box"), (waiting, None)):
        full = client.get(f"/api/v1/runs/{run_id}").get_json()
        assert listed[run_id]["runner"] == full["runner"] == name
        assert listed[run_id] == {k: full[k] for k in listed[run_id]}
    page = client.get("/runs?sort=step_time_s").get_data(as_text=True)
    assert f'value="{taken}"' in page and f'value="{waiting}"' not in page  # no result
