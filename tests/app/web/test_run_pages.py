"""The experiment journal's run pages, through the real app and a real SQLite file: the
catalogue, the form generated from each parameter schema and its server-side validation
(nothing queued on bad input), the run page, cancel and rerun, compare, and the run list
with its filters.

Schedules are in test_schedule_pages.py, what viewers may see and do in test_page_access.py.
"""

from __future__ import annotations

import re

import pytest
from markupsafe import escape

from app.journal import run_files, runs
from app.models import Run, RunEvent
from jobs.lab.catalogue import registry
from tests.helpers import (
    THIS_WEEK,
    count,
    error_of,
    form_for,
    load,
    make_schedule,
    parse,
    queue,
    start_run,
)
from tests.strict_pages import assert_strict_page

RESULT = {
    "status": "succeeded", "environment": {"torch": "2.5.1", "backend": "gloo"},
    "strategies": [
        {"strategy": "ddp", "label": "torch DDP", "tokens_per_s": 20000.0,
         "step_time_s": {"median": 0.010, "p10": 0.009, "p90": 0.011},
         "prediction": {"step_time_s": 0.004, "dominant": "compute", "residual_s": 0.006,
                        "residual_fraction": 0.6,
                        "unmodelled": ["gloo's threads taking cores from compute"]},
         "ratios": {"step_time": 2.5, "memory_peak": 1.02},
         "mfu": {"value": 0.12, "peak_name": "measured 512^3 float32 GEMM"},
         "memory": [{"rank": 0, "peak": {"measured": 2_040_000, "predicted": 2_000_000,
                                         "ratio": 1.02}},
                    {"rank": 1, "peak": {"measured": 1_980_000, "predicted": 2_000_000,
                                         "ratio": 0.99}}],
         "correctness": {"passed": True, "reason": None, "max_grad_abs_error": 1e-8,
                         "loss_abs_error": 1e-7, "max_param_abs_error": 2e-8,
                         "max_state_abs_error": 3e-8, "steps_checked": 3}},
        {"strategy": "dp_bucket", "label": "bucketed", "tokens_per_s": 15000.0,
         "step_time_s": {"median": 0.013}, "prediction": {"step_time_s": 0.004},
         "correctness": {"passed": False, "reason": "grad:w differs by 0.5",
                         "max_grad_abs_error": 0.5}},
    ],
}


def finish(db, run_id: int, result: dict) -> None:
    """Play the runner's part directly in the database: lease, run, result, success."""
    with db.write() as session:
        run = session.get(Run, run_id)
        runs.transition(session, run, runs.LEASED, actor="runner:test")
        runs.transition(session, run, runs.RUNNING, actor="runner:test")
        runs.store_result(session, run, result)
        runs.transition(session, run, runs.SUCCEEDED, actor="runner:test")


# -- the catalogue and the generated form -------------------------------------------------


def test_the_catalogue_shows_every_experiment(client):
    response = client.get("/experiments")
    assert response.status_code == 200
    assert_strict_page(response)
    for name, spec in registry.EXPERIMENTS.items():
        assert str(escape(spec["title"])) in response.text
        assert str(escape(spec["description"])) in response.text
        assert str(escape(spec["result"])) in response.text
        assert f'href="/experiments/{name}/run"' in response.text


@pytest.mark.parametrize("experiment", sorted(registry.EXPERIMENTS))
def test_the_form_has_the_right_input_for_each_parameter(client, experiment):
    response = client.get(f"/experiments/{experiment}/run")
    assert response.status_code == 200
    assert_strict_page(response)
    page = parse(response.text)
    for name, spec in registry.describe(experiment)["params"].items():
        key = "param." + name
        assert str(escape(spec["description"])) in response.text
        if spec["type"] in ("int", "float"):
            (field,) = page.inputs[key]
            assert field["type"] == "number"
            assert field["step"] == ("1" if spec["type"] == "int" else "any")
            assert float(field["value"]) == spec["default"]
            for bound in ("min", "max"):
                if bound in spec:
                    assert float(field[bound]) == spec[bound]
        elif spec["type"] == "bool":
            (field,) = page.inputs[key]
            assert field["type"] == "checkbox"
            assert ("checked" in field) == spec["default"]
        elif spec["type"] == "str_list":
            boxes = page.inputs[key]
            assert all(b["type"] == "checkbox" for b in boxes)
            assert [b["value"] for b in boxes] == spec["choices"]
            assert [b["value"] for b in boxes if "checked" in b] == [
                c for c in spec["choices"] if c in spec["default"]]
        else:
            assert page.selects[key] == spec["choices"]
            assert f'<option value="{spec["default"]}" selected>' in response.text


def test_a_valid_form_queues_a_run_and_goes_to_its_page(client, db):
    run_id = start_run(client, "data_parallel", steps=1, strategies=["single", "ddp"],
                       bucket_cap_mb="0.5")
    run = load(db, Run, run_id)
    assert run.status == runs.QUEUED and run.trigger == "manual"
    assert run.params["steps"] == 1 and run.params["strategies"] == ["single", "ddp"]
    assert run.params["bucket_cap_mb"] == 0.5
    assert run.params == registry.validate("data_parallel", run.params)  # fully resolved
    page = client.get(f"/runs/{run_id}")
    assert page.status_code == 200
    assert "queued" in page.text and "data_parallel" in page.text
    assert 'data-live' in page.text and "runs.js" in page.text  # it polls while unfinished


def test_unchecked_bool_is_false_and_missing_numbers_take_defaults(client, db):
    data = form_for("collectives", measure_overhead=False)
    del data["param.iters"]  # a script that leaves a number out gets the default
    response = client.post("/experiments/collectives/run", data=data)
    assert response.status_code == 303
    run = load(db, Run, 1)
    assert run.params["measure_overhead"] is False
    assert run.params["iters"] == registry.EXPERIMENTS["collectives"]["params"]["iters"]["default"]


BAD_INPUTS = [
    ("data_parallel", {"steps": "0"}, "steps", ">= 1"),
    ("data_parallel", {"steps": "abc"}, "steps", "whole number"),
    ("data_parallel", {"steps": "2.5"}, "steps", "whole number"),
    ("data_parallel", {"steps": ""}, "steps", "enter a number"),
    ("data_parallel", {"bucket_cap_mb": "lots"}, "bucket_cap_mb", "must be a number"),
    ("data_parallel", {"bucket_cap_mb": "nan"}, "bucket_cap_mb", "finite"),
    ("data_parallel", {"model": "transformer"}, "model", "must be one of"),
    ("data_parallel", {"world_size": "9"}, "world_size", "<= 8"),
    ("data_parallel", {"batch_size": "7"}, "batch_size", "divisible"),
    ("data_parallel", {"strategies": []}, "strategies", "must not be empty"),
    ("data_parallel", {"strategies": ["ddp", "bogus"]}, "strategies", "unknown item"),
    ("gemm_roofline", {"world_size": "2"}, "world_size", "<= 1"),
    ("collectives", {"world_size": "1"}, "world_size", "at least 2 ranks"),
    ("pipeline", {"micro_batches": "1"}, "micro_batches", "needs micro_batches >= stages"),
    ("tensor_parallel", {"world_size": "3"}, "heads", "not divisible"),
]


@pytest.mark.parametrize("experiment,changes,field,message", BAD_INPUTS)
def test_bad_input_is_refused_next_to_its_field_and_queues_nothing(client, db, experiment,
                                                                    changes, field, message):
    response = client.post(f"/experiments/{experiment}/run",
                           data=form_for(experiment, **changes))
    assert response.status_code == 422
    assert message in error_of(response.text, "p-" + field)
    assert "Not queued." in response.text
    assert count(db, Run) == 0 and count(db, RunEvent) == 0
    assert_strict_page(response)
    # What the user typed is still there to correct.
    page = parse(response.text)
    for name, value in changes.items():
        if isinstance(value, list):
            ticked = [b["value"] for b in page.inputs["param." + name] if "checked" in b]
            assert ticked == [v for v in value if v in ticked]
        elif "param." + name in page.inputs:
            assert page.inputs["param." + name][0]["value"] == value
        else:
            assert f'<option value="{value}" selected>' in response.text


def test_unknown_experiment_is_404_and_queues_nothing(client, db):
    assert client.get("/experiments/warp_drive/run").status_code == 404
    response = client.post("/experiments/warp_drive/run", data={"param.steps": "1"})
    assert response.status_code == 404
    assert "warp_drive" in response.text
    assert count(db, Run) == 0


# -- the run page -------------------------------------------------------------------------


def test_the_run_page_shows_status_history_params_result_and_log(app, client, db):
    run_id = queue(db, steps=1)
    with db.write() as session:
        run = session.get(Run, run_id)
        runs.transition(session, run, runs.LEASED, actor="runner:gpu-1", reason="leased")
        runs.transition(session, run, runs.RUNNING, actor="runner:gpu-1")
        run_files.append_log(app.config["DATA_DIR"], session, run, 0,
                        "step 1 <script>alert(1)</script>\n")
        runs.store_result(session, run, RESULT)
        runs.transition(session, run, runs.SUCCEEDED, actor="runner:gpu-1")
        run.carded_entry_id = 7
    response = client.get(f"/runs/{run_id}")
    assert response.status_code == 200
    assert_strict_page(response)
    text = response.text
    assert "succeeded" in text and 'class="run-card' in text  # cards.card(run)
    for change in ("queued → <strong>leased", "leased → <strong>running",
                   "running → <strong>succeeded"):
        assert change in text
    assert "runner:gpu-1" in text
    assert re.search(r"<th scope=\"row\">steps</th><td>1 <span class=\"hint\">default 5", text)
    assert "2.5.1" in text  # environment from the result
    assert "grad:w differs by 0.5" in text  # a failed correctness check is visible
    # the card says what the model leaves unexplained, the memory seen against the
    # formula per rank, the peak its MFU is a fraction of, and how many steps were gated
    assert "+6 ms (+60%)" in text and "not modelled: gloo" in text
    assert "r0 2.04 MB / 2 MB (1.02×)" in text and "r1 1.98 MB / 2 MB (0.99×)" in text
    assert "12% <small>of measured 512^3 float32 GEMM</small>" in text
    assert "✓ 3 steps, max err 1.0e-08" in text
    assert '<td class="num col-extra">3</td>' in text and "3.0e-08" in text  # steps, state
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text and "<script>alert" not in text
    assert 'href="/entries/7"' in text
    assert "data-live" not in text and "runs.js" not in text  # finished: nothing to poll


def test_an_unknown_run_is_a_404_page(client):
    response = client.get("/runs/999")
    assert response.status_code == 404
    assert "no run 999" in response.text
    assert client.get("/runs/999/cancel").status_code == 404
    assert client.post("/runs/999/rerun").status_code == 404


def test_cancel_a_queued_run(client, db):
    run_id = queue(db)
    page = client.get(f"/runs/{run_id}")
    assert f'href="/runs/{run_id}/cancel"' in page.text
    confirm = client.get(f"/runs/{run_id}/cancel")
    assert confirm.status_code == 200 and "Cancel run" in confirm.text
    assert_strict_page(confirm)
    assert load(db, Run, run_id).status == runs.QUEUED  # the GET only asks
    response = client.post(f"/runs/{run_id}/cancel")
    assert response.status_code == 303 and response.location == f"/runs/{run_id}"
    assert load(db, Run, run_id).status == runs.CANCELLED
    page = client.get(f"/runs/{run_id}")
    assert "cancelled" in page.text and f'/runs/{run_id}/cancel"' not in page.text
    again = client.post(f"/runs/{run_id}/cancel")
    assert again.status_code == 409 and "nothing to cancel" in again.text


def test_cancel_of_a_running_run_is_requested(client, db):
    run_id = queue(db)
    with db.write() as session:
        runs.transition(session, session.get(Run, run_id), runs.LEASED, actor="runner:x")
    assert client.post(f"/runs/{run_id}/cancel").status_code == 303
    run = load(db, Run, run_id)
    assert run.status == runs.LEASED and run.cancel_requested_at is not None
    assert "cancel requested" in client.get(f"/runs/{run_id}").text


def test_rerun_makes_a_linked_run(client, db):
    first = start_run(client, "collectives", iters="3")
    response = client.post(f"/runs/{first}/rerun")
    assert response.status_code == 303
    second = int(response.location.rsplit("/", 1)[1])
    run = load(db, Run, second)
    assert run.parent_id == first and run.trigger == "rerun"
    assert run.params == load(db, Run, first).params
    assert f'rerun of <a href="/runs/{first}">#{first}</a>' in client.get(f"/runs/{second}").text
    assert f'<a href="/runs/{second}">#{second}</a>' in client.get(f"/runs/{first}").text


def test_change_and_run_prefills_from_a_run(client, db):
    run_id = start_run(client, "data_parallel", steps=7)
    page = parse(client.get(f"/experiments/data_parallel/run?from={run_id}").text)
    assert page.inputs["param.steps"][0]["value"] == "7"
    huge = client.get("/experiments/data_parallel/run?from=" + "9" * 30)
    assert huge.status_code == 200 and "Starting from" not in huge.text


# -- compare ------------------------------------------------------------------------------


def test_compare_shows_the_parameter_diff_and_metrics_side_by_side(client, db):
    a, b = queue(db, steps=1), queue(db, steps=2)
    finish(db, a, RESULT)
    faster = {**RESULT, "strategies": [{**RESULT["strategies"][0], "tokens_per_s": 30000.0}]}
    finish(db, b, faster)
    for url in (f"/runs/compare?ids={a},{b}", f"/runs/compare?ids={a}&ids={b}"):
        response = client.get(url)
        assert response.status_code == 200
        assert_strict_page(response)
        text = response.text
        assert '<tr class="differs"><th scope="row">steps' in text
        assert '<tr class="same"><th scope="row">hidden' in text
        assert "1 parameter differs" in text or "1 parameter differ" in text
        assert "torch DDP" in text and "20 k" in text and "30 k" in text
        assert '<span class="delta better">+50%</span>' in text
        assert "unexplained" in text and "memory / predicted" in text and "1.02×" in text
        assert "2.5.1" in text


@pytest.mark.parametrize("query,status", [("ids=1", 422), ("ids=", 422), ("ids=1,x", 422),
                                          ("ids=1,999", 404), ("", 422),
                                          ("ids=1," + "9" * 30, 422)])
def test_compare_refuses_bad_ids(client, db, query, status):
    queue(db)
    response = client.get(f"/runs/compare?{query}")
    assert response.status_code == status
    assert_strict_page(response)


def test_the_run_list_picks_runs_to_compare_without_script(client, db):
    queue(db), queue(db)
    page = parse(client.get("/runs").text)
    assert any(f.get("action") == "/runs/compare" for f in page.forms)
    assert [i["value"] for i in page.inputs["ids"]] == ["2", "1"]


# -- the run list -------------------------------------------------------------------------


def test_the_run_list_filters(client, db):
    dp = queue(db, "data_parallel")
    coll = queue(db, "collectives")
    with db.write() as session:
        runs.cancel(session, session.get(Run, coll), actor="test")
    listing = client.get("/runs")
    assert listing.status_code == 200
    assert_strict_page(listing)
    assert listing.text.index(f"#{coll}<") < listing.text.index(f"#{dp}<")  # newest first
    only_queued = client.get("/runs?status=QUEUED").text
    assert f'href="/runs/{dp}"' in only_queued and f'href="/runs/{coll}"' not in only_queued
    by_experiment = client.get("/runs?experiment=collectives").text
    assert f'href="/runs/{coll}"' in by_experiment and f'href="/runs/{dp}"' not in by_experiment
    assert f'href="/runs/{dp}"' in client.get(f"/runs?week={THIS_WEEK}").text
    assert f'href="/runs/{dp}"' not in client.get("/runs?week=2001-W01").text


@pytest.mark.parametrize("query,message", [
    ("status=DONE", "status is one of"), ("week=2024-W99", "no week 99"),
    ("week=yesterday", "ISO week"), ("schedule=abc", "schedule is"), ("before=x", "before"),
    ("schedule=" + "9" * 30, "schedule is"), ("before=" + "9" * 30, "before"),
])
def test_a_bad_filter_is_a_4xx_with_the_message(client, db, query, message):
    queue(db)
    response = client.get(f"/runs?{query}")
    assert response.status_code == 400
    assert message in response.text
    assert_strict_page(response)


def test_the_run_list_pages_by_run_id(client, db):
    with db.write() as session:
        for _ in range(55):
            runs.create(session, "collectives", {}, actor="test")
    first = client.get("/runs").text
    assert 'href="/runs/55"' in first and 'href="/runs/6"' in first
    assert 'href="/runs/5"' not in first
    assert "before=6" in first
    second = client.get("/runs?before=6").text
    assert 'href="/runs/5"' in second and 'href="/runs/1"' in second
    assert 'href="/runs/6"' not in second and "Older runs" not in second
    ten = client.get("/runs?limit=10").text  # the API's limit, kept by the next link
    assert 'href="/runs/46"' in ten and 'href="/runs/45"' not in ten and "limit=10" in ten


# -- every page ---------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/experiments", "/experiments/pipeline/run", "/runs",
                                  "/runs/1", "/runs/1/cancel", "/runs/compare?ids=1,2",
                                  "/schedules", "/schedules/1", "/schedules/1/delete",
                                  "/runs?week=bad", "/runs/404", "/experiments/nope/run"])
def test_every_page_has_the_csp_and_no_inline_script(client, db, path):
    queue(db), queue(db)
    make_schedule(client)
    response = client.get(path)
    assert response.status_code in (200, 400, 404)
    assert_strict_page(response)


def test_compare_changes_read_sensibly():
    """A signed quantity or one from nothing gets no ratio ("-524%" read as nonsense); a
    share (MFU) changes in points, and a small one is not shown as 0%."""
    from app.web.pages.run_summary import Metric, change

    def metric(value, **kw):
        return Metric("m", value, str(value), "lower", **kw)

    assert change(metric(0.00089), metric(-0.00382)) == ("", "")  # unexplained time
    assert change(metric(0.0), metric(0.5)) == ("", "")
    unexplained = lambda v: Metric("u", v, "", signed=True)  # noqa: E731
    assert change(unexplained(0.006), unexplained(0.0)) == ("", "")  # not "-100%"
    assert change(metric(2.0), metric(1.0)) == ("\u221250%", "better")  # a minus sign
    mfu = lambda v: Metric("MFU", v, "", "higher", fraction=True)  # noqa: E731
    assert change(mfu(0.004), mfu(0.00512)) == ("+0.1 pt", "better")
    assert change(mfu(0.30), mfu(0.25)) == ("\u22125.0 pt", "worse")
    assert change(mfu(0.30), mfu(0.30)) == ("±0 pt", "same")
