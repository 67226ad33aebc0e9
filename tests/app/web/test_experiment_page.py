"""/experiments/<name>, the address a person types or shares: what the experiment teaches,
its parameters with their defaults, the suggested first run, its recent runs with their
headline numbers and the trends of their parameters, and for an owner (only) the buttons
that run it. The catalogue links each experiment's page; a name that is none is a 404."""

from __future__ import annotations

import pytest

from app.journal import run_metrics
from app.models import Run, Schedule
from app.web.pages import learning
from jobs.lab.catalogue import own, registry
from tests.app.journal.test_own_catalogue import EXAMPLE
from tests.app.journal.test_run_query import make, strategy, training
from tests.app.journal.test_trends import SMALL, collectives_result, finished
from tests.helpers import OWNER, VIEWER, Elements, add_token, bearer, schedule_form
from tests.strict_pages import assert_strict_page


def test_the_page_teaches_the_experiment_and_lists_its_parameters(client):
    response = client.get("/experiments/zero")
    assert response.status_code == 200
    assert_strict_page(response)
    page = response.text
    spec = registry.describe("zero")
    headings = [text for _, text in Elements(page).all("h2")]
    assert Elements(page).all("h1")[0][1] == spec["title"]
    for heading in ("What it teaches", "A suggested first run", "Parameters", "Recent runs"):
        assert heading in headings
    guide = learning.guide("zero")
    assert guide.see in page and guide.learn in page and 'class="diagram"' in page
    listed = page[page.index('class="params-list"'):page.index("</dl>")]
    assert [text for _, text in Elements(listed).all("dt")] == list(spec["params"])
    assert "default 2 · 1 to 8" in listed  # world_size, as the form's help says it
    assert "default auto · one of auto, cpu, cuda" in listed
    assert "default ddp, zero1, zero2, zero3, fsdp2 · any of single, ddp," in listed
    first = dict(learning.first_run("zero"))
    shown = page[page.index('class="first-run"'):]
    assert f"<code>hidden</code> = {first['hidden']}" in shown
    assert "<code>seed</code>" not in shown[:shown.index("</ul>")]  # a default: not repeated
    assert "Never run yet." in page
    for link in ('href="/experiments/zero/run?first=1"', 'href="/experiments/zero/run"',
                 'href="/schedules?experiment=zero#new-schedule"'):
        assert link in page


def test_recent_runs_show_their_numbers_and_link_their_trends(client, db):
    ids = [finished(db, "collectives", SMALL, collectives_result(b)) for b in (40e9, 30e9)]
    other = finished(db, "collectives", {**SMALL, "max_bytes": 1 << 17},
                     collectives_result(41e9))
    schedule_id = int(client.post("/schedules", data=schedule_form(
        experiment="collectives", name="Sunday sweep")).location.rsplit("/")[-1])
    with db.read() as session:
        keys = {session.get(Run, i).param_key for i in (ids[0], other)}
        assert session.get(Schedule, schedule_id).experiment == "collectives"
    page = client.get("/experiments/collectives").text
    recent = page[page.index('class="recent-runs"'):page.index("</ul>",
                                                               page.index("recent-runs"))]
    linked = [int(a["href"].rsplit("/", 1)[1]) for a, _ in Elements(recent).all("a")]
    assert linked == [other, *reversed(ids)]  # newest first
    assert f"bus bandwidth {run_metrics.shown('busbw_Bps', 30e9)} (all_reduce)" in recent
    for key in keys:
        assert f'href="/trends/{key}"' in page
    assert f"max_bytes={1 << 17:,}</a>" in page  # a set told apart by what differs
    assert f'2 successful runs, the latest <a href="/runs/{ids[1]}">#{ids[1]}</a>' in page
    assert f'href="/schedules/{schedule_id}/trend">Schedule “Sunday sweep”</a>' in page
    assert 'href="/runs?experiment=collectives"' in page


def test_a_recent_runs_numbers_name_the_strategy_each_is_the_best_of(client, db):
    run_id = make(db, "pipeline", training(strategy("single", 0.001, mfu=0.9),
                                           strategy("1f1b", 0.01), strategy("gpipe", 0.02,
                                                                              mfu=0.3)))
    page = client.get("/experiments/pipeline").text
    recent = page[page.index('class="recent-runs"'):page.index("</ul>",
                                                               page.index("recent-runs"))]
    assert f'href="/runs/{run_id}"' in recent
    # the reference is faster still, but it is the yardstick, not the headline
    assert f"step time {run_metrics.shown('step_time_s', 0.01)} (1f1b)" in recent
    assert f"tokens/s {run_metrics.shown('tokens_per_s', 25600)} (1f1b)" in recent
    assert "MFU 30% (gpipe)" in recent


def test_a_parameter_set_says_how_many_of_its_differences_are_not_shown(client, db):
    # the first few differences name a set; the rest are counted, not silently dropped
    params = {"world_size": 2, "device": "cpu", "batch_size": 4, "seq_len": 16, "hidden": 32,
              "layers": 2, "heads": 2, "vocab": 64, "warmup": 1, "steps": 2}
    finished(db, "data_parallel", params, collectives_result(40e9))
    page = client.get("/experiments/data_parallel").text
    assert "batch_size=4, device=cpu, heads=2, hidden=32, layers=2, seq_len=16 and 2 more</a>" \
        in page  # vocab and warmup (steps samples: not a difference)


def test_a_viewer_reads_the_page_without_the_buttons(served):
    owner, viewer = served.as_user(OWNER), served.as_user(VIEWER)
    mine, theirs = owner("get", "/experiments/pipeline"), viewer("get", "/experiments/pipeline")
    assert theirs.status_code == 200
    assert_strict_page(theirs)
    assert "/experiments/pipeline/run" in mine.text
    assert "/experiments/pipeline/run" not in theirs.text
    assert "Schedule…" not in theirs.text and "Parameters" in theirs.text
    assert "need not beat naive model parallel" in theirs.text  # what a CPU cannot show


def test_the_catalogue_links_each_experiments_page(client):
    page = client.get("/experiments").text
    for name in registry.EXPERIMENTS:
        assert f'<h2><a href="/experiments/{name}">' in page
        assert client.get(f"/experiments/{name}").status_code == 200
    form = client.get("/experiments/pipeline/run").text
    assert 'href="/experiments/pipeline">pipeline</a>' in form


@pytest.mark.parametrize("path", [
    "/experiments/nope", "/experiments/Zero", "/experiments/_zero", "/experiments/zero%20",
    "/experiments/" + "a" * 41, "/experiments/%E2%80%AEzero", "/experiments/zero.html",
])
def test_a_name_that_is_no_experiment_is_a_404_page(client, path):
    response = client.get(path)
    assert response.status_code == 404
    assert "text/html" in response.headers["Content-Type"]


def test_the_page_is_read_only(client):
    assert client.post("/experiments/zero").status_code == 405


def test_an_own_experiment_has_its_page(client, db):
    headers = bearer(add_token(db, "gpu-own", "runner"))
    declared = own.read_folder(EXAMPLE.parent)
    assert client.post("/api/v1/runner/register", headers=headers, json={
        "labels": {"gpu_count": 0}, "experiments": declared}).status_code == 200
    response = client.get("/experiments/tiny_lm")
    assert response.status_code == 200
    assert_strict_page(response)
    assert "Your own experiment" in response.text and "gpu-own" in response.text
    assert '<code>head_dim</code>' in response.text
