"""The experiment journal's pages, through the real app and a real SQLite file: the
catalogue, the form generated from each parameter schema and its server-side validation
(nothing queued on bad input), the run list and its filters, the run page, cancel and
rerun, compare, schedules with cron validation, and what viewers may see and do."""

from __future__ import annotations

import datetime as dt
import html as html_lib
import re
from html.parser import HTMLParser

import pytest
import sqlalchemy as sa
from markupsafe import escape

from app.journal import run_files, runs
from app.models import Run, RunEvent, Schedule
from app.notebook import isoweeks
from jobs.lab import registry
from tests.strict_pages import assert_strict_page

THIS_WEEK = isoweeks.iso_week(dt.datetime.now(dt.UTC).date())  # the fixtures run in UTC


# -- helpers ------------------------------------------------------------------------------


def form_for(experiment: str, **changes) -> dict:
    """What a browser sends for the generated form: every field, defaults unless changed."""
    data: dict = {}
    for name, spec in registry.describe(experiment)["params"].items():
        value = changes.pop(name, spec["default"])
        key = "param." + name
        if spec["type"] == "bool":
            if value is True or value == "on":
                data[key] = "on"
        elif spec["type"] == "str_list":
            data[key] = list(value)
        else:
            data[key] = str(value)
    assert not changes, f"not parameters of {experiment}: {changes}"
    return data


def count(db, model=Run, *where) -> int:
    with db.read() as session:
        return session.scalar(sa.select(sa.func.count()).select_from(model).where(*where))


def load(db, model, row_id):
    with db.read() as session:
        return session.get(model, row_id)


def queue(db, experiment="data_parallel", **params) -> int:
    with db.write() as session:
        return runs.create(session, experiment, params, actor="test").id


def start_run(client, experiment="data_parallel", **changes) -> int:
    response = client.post(f"/experiments/{experiment}/run", data=form_for(experiment, **changes))
    assert response.status_code == 303, response.text
    return int(re.fullmatch(r"/runs/(\d+)", response.location)[1])


def error_of(html: str, input_id: str) -> str:
    match = re.search(rf'<p class="field-error" id="{re.escape(input_id)}-error"[^>]*>(.*?)</p>',
                      html, re.S)
    return html_lib.unescape(match[1]) if match else ""


class Inputs(HTMLParser):
    """Every form control on a page: inputs by name (a list: checkbox groups repeat a
    name), selects with their options."""

    def __init__(self):
        super().__init__()
        self.inputs: dict[str, list[dict]] = {}
        self.selects: dict[str, list[str]] = {}
        self.forms: list[dict] = []
        self._select: str | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "form":
            self.forms.append(a)
        elif tag == "input" and a.get("name"):
            self.inputs.setdefault(a["name"], []).append(a)
        elif tag == "select":
            self._select = a.get("name")
            self.selects[self._select] = []
        elif tag == "option" and self._select:
            self.selects[self._select].append(a.get("value"))

    def handle_endtag(self, tag):
        if tag == "select":
            self._select = None


def parse(html: str) -> Inputs:
    page = Inputs()
    page.feed(html)
    return page


def post_forms(html: str) -> list[dict]:
    return [f for f in parse(html).forms if f.get("method", "").lower() == "post"]


RESULT = {
    "status": "succeeded", "environment": {"torch": "2.5.1", "backend": "gloo"},
    "strategies": [
        {"strategy": "ddp", "label": "torch DDP", "tokens_per_s": 20000.0,
         "step_time_s": {"median": 0.010, "p10": 0.009, "p90": 0.011},
         "prediction": {"step_time_s": 0.004, "dominant": "compute"},
         "ratios": {"step_time": 2.5}, "mfu": {"value": 0.12},
         "correctness": {"passed": True, "reason": None, "max_grad_abs_error": 1e-8,
                         "loss_abs_error": 1e-7, "max_param_abs_error": 2e-8}},
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
    assert count(db) == 0 and count(db, RunEvent) == 0
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
    assert count(db) == 0


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


# -- schedules ----------------------------------------------------------------------------


def schedule_form(experiment="collectives", params_for=None, **fields) -> dict:
    data = {"name": "Sunday sweep", "experiment": experiment, "cron": "0 2 * * sun",
            "timezone": "Europe/Berlin", "enabled": "on", "misfire_grace_hours": "6",
            "params_for": params_for or experiment,
            **form_for(experiment if experiment in registry.EXPERIMENTS else "collectives")}
    for key, value in fields.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    return data


def make_schedule(client, **fields) -> int:
    response = client.post("/schedules", data=schedule_form(**fields))
    assert response.status_code == 303, response.text
    return int(response.location.rsplit("/", 1)[1])


def test_create_a_schedule_and_see_its_next_fires(client, db):
    listing = client.get("/schedules")
    assert listing.status_code == 200
    assert_strict_page(listing)
    assert "param.world_size" in listing.text  # the generated form for the new schedule
    schedule_id = make_schedule(client, **{"param.iters": "3"})
    schedule = load(db, Schedule, schedule_id)
    assert (schedule.cron, schedule.timezone, schedule.enabled) == ("0 2 * * sun",
                                                                    "Europe/Berlin", True)
    assert schedule.misfire_grace_s == 6 * 3600 and schedule.params["iters"] == 3
    page = client.get(f"/schedules/{schedule_id}")
    assert page.status_code == 200
    assert_strict_page(page)
    fires = re.findall(r"<li><time datetime=\"[^\"]+\">(Sun \d{4}-\d\d-\d\d 02:00 CES?T)</time>",
                       page.text)
    assert len(fires) == 5  # the next five, in the schedule's own time zone
    assert "Sunday sweep" in client.get("/schedules").text


@pytest.mark.parametrize("cron,message", [
    ("61 * * * *", "higher than the maximum"),
    ("* * *", "five fields"),
    ("0 2 31 2 *", "never fires"),
    ("every sunday", "five fields"),
    ("", "cron is required"),
])
def test_a_bad_cron_is_refused_next_to_the_field(client, db, cron, message):
    response = client.post("/schedules", data=schedule_form(cron=cron))
    assert response.status_code == 422
    assert message in error_of(response.text, "s-cron")
    assert f'value="{cron}"' in response.text
    assert count(db, Schedule) == 0
    schedule_id = make_schedule(client)
    before = load(db, Schedule, schedule_id)
    response = client.post(f"/schedules/{schedule_id}",
                           data=schedule_form(cron=cron, name="Renamed"))
    assert response.status_code == 422
    assert message in error_of(response.text, "s-cron")
    after = load(db, Schedule, schedule_id)
    assert (after.cron, after.name, after.updated_at) == (before.cron, before.name,
                                                          before.updated_at)


@pytest.mark.parametrize("fields,input_id,message", [
    ({"timezone": "Mars/Olympus"}, "s-timezone", "unknown time zone"),
    ({"misfire_grace_hours": "soon"}, "s-grace", "number of hours"),
    ({"misfire_grace_hours": "1000"}, "s-grace", "0 to 168 hours"),
    ({"param.world_size": "1"}, "p-world_size", "at least 2 ranks"),
    ({"param.iters": "many"}, "p-iters", "whole number"),
    ({"experiment": "warp_drive"}, "s-experiment", "unknown experiment"),
])
def test_bad_schedule_fields_are_refused_next_to_the_field(client, db, fields, input_id,
                                                           message):
    response = client.post("/schedules", data=schedule_form(**fields))
    assert response.status_code == 422
    assert message in error_of(response.text, input_id)
    assert count(db, Schedule) == 0


def test_edit_a_schedule(client, db):
    schedule_id = make_schedule(client)
    response = client.post(f"/schedules/{schedule_id}", data=schedule_form(
        cron="30 6 * * mon-fri", timezone="UTC", enabled=None, name="Weekday sweep",
        misfire_grace_hours="1.5", **{"param.iters": "4"}))
    assert response.status_code == 303
    schedule = load(db, Schedule, schedule_id)
    assert (schedule.cron, schedule.timezone, schedule.enabled, schedule.name) == (
        "30 6 * * mon-fri", "UTC", False, "Weekday sweep")
    assert schedule.misfire_grace_s == 5400 and schedule.params["iters"] == 4
    page = client.get(response.location)
    assert "Saved." in page.text and "06:30 UTC" in page.text


def test_switching_the_experiment_shows_its_parameters_and_saves_nothing(client, db):
    schedule_id = make_schedule(client)
    response = client.post(f"/schedules/{schedule_id}",
                           data=schedule_form(experiment="gpt_mfu", params_for="collectives"))
    assert response.status_code == 200
    assert "Review them, then save" in response.text
    assert "param.peak_tflops" in response.text and "param.ops" not in response.text
    assert load(db, Schedule, schedule_id).experiment == "collectives"
    response = client.post(f"/schedules/{schedule_id}", data=schedule_form("gpt_mfu"))
    assert response.status_code == 303
    assert load(db, Schedule, schedule_id).experiment == "gpt_mfu"


def test_delete_a_schedule_keeps_its_runs(client, db):
    schedule_id = make_schedule(client)
    with db.write() as session:
        run = runs.create(session, "collectives", {}, actor="scheduler", trigger="schedule",
                          schedule_id=schedule_id, scheduled_for=dt.datetime(2025, 1, 5, 1))
        run_id = run.id
    confirm = client.get(f"/schedules/{schedule_id}/delete")
    assert confirm.status_code == 200 and "Delete" in confirm.text
    assert count(db, Schedule) == 1
    response = client.post(f"/schedules/{schedule_id}/delete")
    assert response.status_code == 303 and response.location == "/schedules"
    assert count(db, Schedule) == 0
    assert load(db, Run, run_id).schedule_id is None
    assert client.get(f"/schedules/{schedule_id}").status_code == 404


def test_skipped_fires_are_visible(client, db):
    schedule_id = make_schedule(client)
    with db.write() as session:
        first = runs.create(session, "collectives", {}, actor="scheduler", trigger="schedule",
                            schedule_id=schedule_id, scheduled_for=dt.datetime(2025, 1, 5, 1))
        second = runs.create(session, "collectives", {}, actor="scheduler", trigger="schedule",
                             schedule_id=schedule_id, scheduled_for=dt.datetime(2025, 1, 12, 1))
        runs.skip(session, second, reason=f"run {first.id} of this schedule is still unfinished")
        other = runs.create(session, "collectives", {}, actor="test")
        ids = first.id, second.id, other.id
    page = client.get(f"/schedules/{schedule_id}").text
    assert "skipped" in page and f"run {ids[0]} of this schedule is still unfinished" in page
    assert "1 skipped" in client.get("/schedules").text
    listing = client.get(f"/runs?schedule={schedule_id}").text
    assert f'href="/runs/{ids[1]}"' in listing and "skipped" in listing
    assert f'href="/runs/{ids[2]}"' not in listing
    assert "Sunday sweep" in listing  # "Runs of “Sunday sweep”"


# -- who may do what ----------------------------------------------------------------------


@pytest.fixture
def served(make_app):
    app = make_app(AUTH_MODE="serve", OWNERS=["o@x"], VIEWERS=["v@x"])
    client = app.test_client()

    def as_user(login):
        def call(method, path, **kw):
            return getattr(client, method)(path, headers={"Tailscale-User-Login": login}, **kw)
        return call

    return as_user, app.extensions["db"]


def test_viewers_see_everything_but_no_forms(served):
    as_user, db = served
    owner, viewer = as_user("o@x"), as_user("v@x")
    assert owner("post", "/experiments/collectives/run",
                 data=form_for("collectives")).status_code == 303
    assert owner("post", "/schedules", data=schedule_form()).status_code == 303
    for path in ("/experiments", "/runs", "/runs/1", "/schedules", "/schedules/1",
                 "/runs/compare?ids=1,1"):
        response = viewer("get", path)
        if path.endswith("1,1"):
            assert response.status_code == 422  # one run twice is one run
            continue
        assert response.status_code == 200, path
        assert_strict_page(response)
        assert post_forms(response.text) == [], path
        assert "New run" not in response.text and "Cancel run" not in response.text
        assert "param." not in response.text  # no generated form either
    assert "Sunday sweep" in viewer("get", "/schedules").text
    assert "(read only)" in viewer("get", "/runs/1").text
    for path in ("/runs/1", "/schedules/1"):  # owners do get the forms
        assert post_forms(owner("get", path).text)


def test_viewers_cannot_write(served):
    as_user, db = served
    owner, viewer = as_user("o@x"), as_user("v@x")
    owner("post", "/experiments/collectives/run", data=form_for("collectives"))
    owner("post", "/schedules", data=schedule_form())
    for path in ("/experiments/collectives/run", "/runs/1/cancel", "/schedules/1/delete"):
        assert viewer("get", path).status_code == 403, path
    for path, data in (("/experiments/collectives/run", form_for("collectives")),
                       ("/runs/1/cancel", {}), ("/runs/1/rerun", {}),
                       ("/schedules", schedule_form()),
                       ("/schedules/1", schedule_form(cron="0 3 * * *")),
                       ("/schedules/1/delete", {})):
        response = viewer("post", path, data=data)
        assert response.status_code == 403, path
        assert "v@x" in response.text
    assert count(db) == 1 and load(db, Run, 1).status == runs.QUEUED
    assert count(db, Schedule) == 1 and load(db, Schedule, 1).cron == "0 2 * * sun"


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
