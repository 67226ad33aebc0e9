"""Trends of the owner's own experiments: their reported scalars are headline numbers,
judged as the lab's are, each by the direction its declaration gives it and against the
spread of the per-step series the declaration ties it to (or the default noise). Results
go in through the path a runner's do (runs.store_result, then SUCCEEDED); one real pair
of CPU runs of the example, the second slowed by an env-controlled sleep in a test copy
of the owner's file, is flagged and the webhook hears of it once.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import re
import shutil
import subprocess
import sys

import pytest

from app.journal import alerts, catalogue, run_metrics, trends
from app.journal.scheduler import Scheduler
from app.journal.views import card_trend, cards
from app.models import Run, utcnow
from jobs.lab.catalogue import own
from tests.app.journal import test_trends
from tests.app.journal.test_alerts import Receiver
from tests.app.journal.test_trends import change
from tests.helpers import ROOT, add_token, bearer
from tests.real_runs import launch_once, store_run

EXAMPLE = ROOT / "examples" / "experiments" / "tiny_lm.py"
QUICK = {"steps": 6, "warmup": 1, "batch_per_rank": 2, "seq_len": 8, "heads": 1,
         "head_dim": 8, "layers": 1, "vocab": 16, "device": "cpu", "world_size": 1}
DECLARED = own.read_folder(EXAMPLE.parent)[0]


def register(app, folder=EXAMPLE.parent) -> None:
    """A runner that has the folder's experiments registers, so the server knows them."""
    headers = bearer(add_token(app.extensions["db"], "ownhost", "runner"))
    got = app.test_client().post("/api/v1/runner/register", headers=headers, json={
        "labels": {"gpu_count": 0}, "experiments": own.read_folder(folder)})
    assert got.status_code == 200, got.get_json()


def own_result(step_s: float, spread: float = 0.02, first_loss: float = 4.0,
               **scalars) -> dict:
    """The example's result as the lab writes it: its scalars and per-step series (step
    times whose p10–p90 is ±`spread` around the median)."""
    times = [step_s * (1 + spread * (i - 5) / 4) for i in range(11)]  # p10, p90 at ±spread
    return {"schema_version": 1, "experiment": "tiny_lm", "status": "ok", "own": True,
            "title": DECLARED["title"], "reports": DECLARED["reports"],
            "environment": {"torch": "2.13.0", "host": "a"},
            "reported": {"scalars": {"first_loss": first_loss, "final_loss": 0.5,
                                     "step_time_median": step_s, "tokens_per_s": 16 / step_s,
                                     "parameters": 9000, **scalars},
                         "series": {"step_time": [[i, t] for i, t in enumerate(times)],
                                    "loss": [[0, first_loss], [1, 0.5]]},
                         "tables": {}}}


def finished(app, result: dict, params: dict = QUICK) -> int:
    return test_trends.finished(app.extensions["db"], "tiny_lm", params, result)


def trend_of(app, run_id: int) -> trends.Trend:
    return test_trends.trend_of(app.extensions["db"], run_id)


def test_own_scalars_are_headlines_with_their_direction_and_their_series_spread():
    numbers = trends.headlines(own_result(0.01, spread=0.1, negative=-1.0, zero=0,
                                          flag=True))
    assert set(numbers) == {"first_loss", "final_loss", "step_time_median", "tokens_per_s",
                            "parameters"}  # a change is a ratio: positive amounts only
    step = numbers["step_time_median"]
    assert step.direction == "lower" and step.spread == pytest.approx(0.1)
    assert step.shown() == "10 ms"
    assert numbers["tokens_per_s"].direction == "higher"
    assert numbers["tokens_per_s"].spread == pytest.approx(0.1)
    assert numbers["final_loss"].direction == "lower" and numbers["final_loss"].spread is None
    assert numbers["first_loss"].direction == ""  # declared without one


def test_a_slower_own_run_is_a_regression_and_its_card_names_the_run_before(app, client):
    register(app)
    first = finished(app, own_result(0.010))
    second = finished(app, own_result(0.013, first_loss=6.0))
    found = trend_of(app, second)
    assert found.previous.id == first
    step = change(found, "step_time_median")
    assert step.change == pytest.approx(0.3) and step.measured
    assert step.noise == pytest.approx(0.04)  # both runs' series spreads added
    assert step.regression and change(found, "tokens_per_s").regression
    loss = change(found, "first_loss")  # moved far, but no direction was declared
    assert loss.beyond and not loss.regression and not loss.measured
    assert {c.now.key for c in found.regressions} == {"step_time_median", "tokens_per_s"}

    with app.extensions["db"].read() as session:
        html = cards.run_card(session, f"id: {second}")
    assert f'Since <a href="/runs/{first}">run {first}</a>' in html
    assert "2 regressions</strong> beyond noise" in html
    assert re.search(rf"step_time_median: 13 ms, \+30% vs \w{{3}} \d\d \w{{3}} \(<a href="
                     rf"\"/runs/{first}\">#{first}</a>\), beyond its ±4% noise", html)
    assert "first_loss: 6, +50% vs" in html
    assert "no better direction declared: never judged a regression" in html
    assert "first_loss, parameters: no better direction declared, so trends draw them" in html

    with app.extensions["db"].read() as session:
        key = session.get(Run, second).param_key
    page = client.get(f"/trends/{key}")
    assert page.status_code == 200
    for run_id in (first, second):
        assert f'<a href="/runs/{run_id}" class="trend-point">' in page.text
    assert "step_time_median over 2 runs" in page.text and "first_loss over 2 runs" in page.text


def test_an_own_change_within_its_series_spread_is_noise(app):
    register(app)
    finished(app, own_result(0.010, spread=0.05))
    found = trend_of(app, finished(app, own_result(0.0106, spread=0.05)))
    step = change(found, "step_time_median")
    assert step.measured and step.noise == pytest.approx(0.1)
    assert not step.beyond and not found.regressions
    final = change(found, "final_loss")  # no series: the default noise floor
    assert final.noise == trends.DEFAULT_NOISE and not final.measured
    assert "(no measured spread: assumed)" in card_trend.line_text(final, 1, "Sun")


def test_own_runs_of_other_parameters_are_not_compared(app):
    register(app)
    finished(app, own_result(0.010))
    other = finished(app, own_result(0.020), {**QUICK, "layers": 2})
    assert trend_of(app, other).previous is None
    again = finished(app, own_result(0.010), {**QUICK, "steps": 50})  # sampling only
    assert trend_of(app, again).previous is not None


HOSTILE_OWN = [
    {"own": True, "reported": "nothing"},
    {"own": True, "reports": [], "reported": {"scalars": [1, 2], "series": 7}},
    {"own": True, "reports": {"scalars": {"x<b>": {"better": "sideways", "unit": ["s"],
                                                   "spread": {"a": 1}}}},
     "reported": {"scalars": {"x<b>": 1.0, "big": 1.7e308, "<script>": 2.0, "nan": None},
                  "series": {"big": [[0, 1e308], [1, -1e308], [2, "x"], [3], None]}}},
    {"own": True, "reports": {"scalars": {"big": {"spread": "s", "better": "lower"}}},
     "reported": {"scalars": {"big": 1.5e308},
                  "series": {"s": [[i, 1e308 * (i % 2) + 1] for i in range(20)]}}},
]


@pytest.mark.parametrize("result", HOSTILE_OWN, ids=range(len(HOSTILE_OWN)))
def test_own_trends_read_whatever_a_runner_sent(app, client, result):
    """Two runs holding hostile own results, stored as they are (as the lab's trends'
    test does), compared: the card and the trend page still render."""
    ids = []
    for _ in range(2):
        with app.extensions["db"].write() as session:
            run = Run(experiment="tiny_lm", params=QUICK, status="SUCCEEDED", result=result,
                      finished_at=utcnow(),
                      param_key=run_metrics.comparison_key("tiny_lm", QUICK))
            session.add(run)
            session.flush()
            ids.append(run.id)
    with app.extensions["db"].read() as session:
        html = cards.run_card(session, f"id: {ids[1]}")
        assert "<script" not in html and "<b>" not in html
        key = session.get(Run, ids[1]).param_key
        found = trends.trend(session, session.get(Run, ids[1]))
    for c in found.changes if found else []:  # only well-named numbers, bands finite
        assert re.fullmatch(r"\w+", c.now.key)
        assert c.now.high is None or math.isfinite(c.now.high)
    assert client.get(f"/trends/{key}").status_code == 200


def test_a_spread_must_name_a_declared_series():
    decl = json.loads(json.dumps({k: DECLARED[k] for k in ("name", "title", "params",
                                                            "reports")}))
    decl["reports"]["scalars"]["final_loss"]["spread"] = "nowhere"
    with pytest.raises(own.Broken, match="final_loss.spread names a declared series"):
        own.check_declaration(decl)
    decl["reports"]["scalars"]["final_loss"]["spread"] = ["step_time"]
    with pytest.raises(own.Broken, match="spread names a declared series"):
        own.check_declaration(decl)
    decl["reports"]["series"]["step_time"]["spread"] = "loss"  # only a scalar has one
    decl["reports"]["scalars"]["final_loss"].pop("spread")
    with pytest.raises(own.Broken, match="reports.series.step_time is a description"):
        own.check_declaration(decl)
    refused = catalogue.check_report([{**decl, "file": "x.py"}])
    assert "refused by the server" in refused[0]["broken"]


def test_lab_list_names_the_owners_experiments_and_the_broken_ones(tmp_path):
    shutil.copy(EXAMPLE, tmp_path / "tiny_lm.py")
    (tmp_path / "typo.py").write_text("EXPERIMENT = {'name': 'typo',\n")
    env = {**os.environ, own.FOLDER_ENV: str(tmp_path)}
    text = subprocess.run([sys.executable, "-m", "jobs.lab", "list"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60, check=True).stdout
    assert re.search(r"^pipeline\s", text, re.M)
    assert re.search(r"^tiny_lm\s+\(own, tiny_lm\.py\) Tiny language model", text, re.M)
    assert re.search(r"^typo\s+\(own, typo\.py\) broken: syntax error, line", text, re.M)
    listed = json.loads(subprocess.run(
        [sys.executable, "-m", "jobs.lab", "list", "--json"], cwd=ROOT, env=env,
        capture_output=True, text=True, timeout=60, check=True).stdout)
    mine = {e["name"]: e for e in listed if e.get("own")}
    assert set(mine) == {"tiny_lm", "typo"} and "broken" in mine["typo"]
    assert mine["tiny_lm"]["params"]["world_size"]["type"] == "int"


def slowed_copy(folder) -> None:
    """The example with a sleep in every timed step, as long as the test's environment
    asks: the owner's code, copied by the test, so the parameters stay the same."""
    text = EXAMPLE.read_text()
    text = text.replace("import statistics\n", "import os\nimport statistics\n", 1)
    step = "        tokens = data[step]\n"
    assert step in text
    text = text.replace(step, step + '        time.sleep(float(os.environ.get('
                                     '"COMMONPLACE_TEST_STEP_SLEEP", "0")))\n', 1)
    (folder / "tiny_lm.py").write_text(text)


def test_a_real_slowed_own_run_is_a_regression_and_the_webhook_hears_once(
        tmp_path_factory, make_app):
    folder = tmp_path_factory.mktemp("own-slowed")
    slowed_copy(folder)
    normal, slowed = (launch_once(tmp_path_factory, "tiny_lm", QUICK,
                                  env={own.FOLDER_ENV: str(folder),
                                       "COMMONPLACE_TEST_STEP_SLEEP": pause})
                      for pause in ("0", "0.2"))
    hook = Receiver()
    try:
        app = make_app(WEBHOOK_URL=hook.url)
        register(app, folder)
        for _, ran in (normal, slowed):
            assert ran["rc"] == 0, ran["stdout"][-4000:] + ran["stderr"][-4000:]
        first, second = (store_run(app, "tiny_lm", out) for out, _ in (normal, slowed))
        found = trend_of(app, second)
        assert found.previous.id == first
        assert {"step_time_median", "tokens_per_s"} <= {c.now.key for c in found.regressions}
        assert change(found, "step_time_median").measured  # from the per-step series
        now = utcnow()
        for later in (0, alerts.BACKOFF_S, 3600):
            Scheduler(app).alerts(now + dt.timedelta(seconds=later))
    finally:
        hook.close()
    assert hook.answered == [200]
    title, body = hook.got[0]
    assert title == f"Regression in run {second} (tiny_lm)"
    assert re.search(rf"step_time_median: [\d.]+ m?s, \+\d+% vs .* \(#{first}\), beyond", body)
