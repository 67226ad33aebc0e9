"""The calculator beside the lab: a runner's own calibration can price a configuration,
and "Run this here" opens the lab's form prefilled (or says why the lab cannot run it)."""

from __future__ import annotations

import json

import pytest

from app.journal import runs
from app.models import Runner
from jobs.lab.predict import cost
from jobs.lab.predict.calibration import LinkFit
from tests.app.web.test_calculator import ask
from tests.helpers import error_of, parse
from tests.real_runs import lab_output

# -- a runner's own calibration -----------------------------------------------------------


def store_calibrated_run(app, experiment: str, result: dict, runner_name: str) -> int:
    """A SUCCEEDED run of `runner_name` holding `result`."""
    with app.extensions["db"].write() as session:
        runner = session.query(Runner).filter_by(name=runner_name).one_or_none()
        if runner is None:
            runner = Runner(name=runner_name, labels={})
            session.add(runner)
            session.flush()
        run = runs.create(session, experiment, result["params"], actor="test")
        session.flush()
        run.runner_id = runner.id
        for status in (runs.LEASED, runs.RUNNING):
            runs.transition(session, run, status, actor=f"runner:{runner_name}")
        runs.store_result(session, run, result)
        runs.transition(session, run, runs.SUCCEEDED, actor=f"runner:{runner_name}")
        return run.id


def test_a_runners_calibration_prices_the_configuration(app, client, tmp_path_factory):
    out = lab_output(tmp_path_factory, "data_parallel")
    result = json.loads((out / "result.json").read_text())
    cal = result["calibration"]
    older = store_calibrated_run(app, "data_parallel", result, "cpu-box")
    newest = store_calibrated_run(app, "data_parallel", result, "cpu-box")
    junk = store_calibrated_run(app, "data_parallel",
                                {**result, "calibration": {"flops": "fast"}}, "odd-box")

    offered = client.get("/api/v1/calculator/gpus").json["gpus"]
    mine = [g for g in offered if g["gpu"].startswith("run:")]
    assert mine == [{"gpu": f"run:{newest}", "run_id": newest, "runner": "cpu-box",
                     "label": f"calibration of runner cpu-box from run {newest}, "
                              f"{result['environment']['device_model']}"}]
    assert older != newest
    page = client.get("/calculator").text
    assert f'value="run:{newest}"' in page and f"run:{junk}" not in page

    a = ask(client, model="custom", layers=4, hidden=64, heads=4, seq_len=32, vocab=256,
            tied=False, precision="fp32_sgd", gpu=f"run:{newest}", dp=2, zero=0,
            batch_size=8, micro_batches=1)
    f = cost.rank_flops_per_token(4, 64, 32, 256)
    assert a["time"]["terms_s"]["gemm"] == pytest.approx(f["gemm"] * 4 * 32 / cal["flops"])
    assert a["time"]["terms_s"]["op_overhead"] > 0  # the runner's measured overhead
    link = LinkFit(cal["links"]["all_reduce"]["alpha_s"], cal["links"]["all_reduce"]["busbw_Bps"])
    reduce = a["communication"]["DP all_reduce"]
    assert reduce["link"] == "calibrated"
    assert reduce["time_s"] == pytest.approx(reduce["count"] * link.time(
        "all_reduce", reduce["bytes"] / reduce["count"], 2))
    assert a["gpu"]["peak_flops"] == cal["peak_flops"]
    assert any("device memory assumed 16 GB" in line for line in a["assumptions"])

    bad = client.post("/api/v1/calculator", json={"gpu": f"run:{junk}"})
    assert bad.status_code == 422 and bad.json["error"]["field"] == "gpu"


# -- run this here ------------------------------------------------------------------------


def test_a_small_configuration_opens_the_lab_form_prefilled(client):
    a = ask(client, model="custom", layers=4, hidden=64, heads=4, seq_len=32, vocab=256,
            tied=False, dp=1, tp=2, pp=1, zero=0, batch_size=8, micro_batches=1)
    assert a["lab"]["ok"] and a["lab"]["experiment"] == "tensor_parallel"
    page = client.get("/calculator", query_string={k: str(v).lower() if isinstance(v, bool)
                                                   else str(v) for k, v in a["inputs"].items()})
    link = [x for x in page.text.split('"') if x.startswith("/experiments/tensor_parallel/run?")]
    assert link, "no Run this here link"
    form = client.get(link[0].replace("&amp;", "&"))
    assert form.status_code == 200
    inputs = parse(form.text).inputs
    assert inputs["param.world_size"][0]["value"] == "2"
    assert inputs["param.hidden"][0]["value"] == "64"
    assert inputs["param.batch_size"][0]["value"] == "8"


@pytest.mark.parametrize("inputs,why", [
    ({"dp": 2, "tp": 2, "zero": 0, "batch_size": 32, "model": "124m"}, "one kind"),
    ({"dp": 16, "zero": 0, "batch_size": 256, "model": "124m"}, "world_size"),
    ({"dp": 2, "zero": 0, "batch_size": 32, "model": "7b"}, "does not fit"),
    ({"dp": 2, "zero": 1, "batch_size": 32, "micro_batches": 4, "model": "124m"},
     "one micro-batch"),
])
def test_what_the_lab_cannot_run_says_why(client, inputs, why):
    lab = ask(client, **inputs)["lab"]
    assert not lab["ok"] and why in lab["why"]


def test_a_suggested_change_is_checked_to_fit_before_it_is_offered(client):
    seven = {"model": "7b", "gpu": "h100", "dp": 8, "zero": 3}  # 128 sequences, 16 micro
    lab = ask(client, **seven)["lab"]
    assert not lab["ok"] and "set micro-batches to 1 and the batch to" in lab["why"]
    assert ask(client, **seven, micro_batches=1)["lab"]["why"] == "it does not fit in memory"
    taken = ask(client, **seven, **lab["suggest"])  # what it suggests runs here and fits
    assert taken["lab"]["ok"] and taken["memory"]["fits"]
    small = {"model": "124m", "dp": 2, "zero": 1, "batch_size": 32, "micro_batches": 4}
    lab = ask(client, **small)["lab"]
    assert lab["why"].endswith("set micro-batches to 1")
    assert ask(client, **{**small, **lab["suggest"]})["lab"]["ok"]
    tiny = ask(client, **small, memory_gb=0.01)["lab"]  # nothing fits in 10 MB
    assert "does not fit, even one sequence a GPU" in tiny["why"] and "suggest" not in tiny


def test_the_run_form_takes_parameters_from_the_query(client):
    html = client.get("/experiments/pipeline/run?param.world_size=4&param.micro_batches=8"
                      "&param.strategies=gpipe&param.strategies=1f1b").text
    inputs = parse(html).inputs
    assert inputs["param.world_size"][0]["value"] == "4"
    assert inputs["param.micro_batches"][0]["value"] == "8"
    ticked = [i["value"] for i in inputs["param.strategies"] if "checked" in i]
    assert ticked == ["gpipe", "1f1b"]


@pytest.mark.parametrize("query,field", [
    ("param.world_size=many", "world_size"), ("param.world_size=99", "world_size"),
    ("param.heads=3", "heads"), ("param.device=tpu", "device"),
])
def test_a_bad_prefill_is_the_forms_error(client, query, field):
    response = client.get(f"/experiments/pipeline/run?{query}")
    assert response.status_code == 422
    assert error_of(response.text, f"p-{field}")


def test_an_unknown_prefill_parameter_is_refused(client):
    response = client.get("/experiments/pipeline/run?param.colour=red")
    assert response.status_code == 422 and "param.colour" in response.text
