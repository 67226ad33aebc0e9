"""The catalogue teaches: every experiment has a plain-language line of what you will see,
a diagram, and a suggested first run small enough for a CPU that the lab's own registry
accepts; a start-here path goes DP → pipeline → tensor → ZeRO; the first run opens the
new-run form filled in."""

from __future__ import annotations

import re

import pytest

from app.web.pages import learning
from jobs.lab.catalogue import registry
from tests.helpers import OWNER, VIEWER, Elements, form_for, parse
from tests.strict_pages import assert_strict_page

EXPERIMENTS = list(registry.EXPERIMENTS)


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_every_experiment_has_a_guide_a_diagram_and_a_first_run(client, name):
    guide = learning.guide(name)
    assert guide is not None, f"app/web/pages/learning.py has no guide for {name}"
    assert 40 <= len(guide.see) <= 220 and "\n" not in guide.see
    params = registry.validate(name, guide.first_run)  # the lab's own door says yes
    assert params.get("device") == "cpu"
    # five timed steps at most (the fewest the lab's timing trusts), small models; the
    # pipeline's is wider, so that a micro-batch carries more compute than overhead
    assert params.get("steps", 0) <= 5 and params.get("iters", 0) <= 3
    assert params.get("hidden", 0) <= (256 if name == "pipeline" else 64)
    assert params.get("max_bytes", 0) <= 1 << 16

    page = client.get("/experiments")
    card = re.search(rf'<li class="card experiment" id="{name}">(.*?)</li>\s*(?:<li|</ul>)',
                     page.text, re.S)[1]
    svgs = Elements(card).all("svg", "diagram")
    assert len(svgs) == 1 and svgs[0][0]["role"] == "img" and svgs[0][0]["aria-label"]
    assert "What you will see:" in card
    assert f'/experiments/{name}/run?first=1' in card


def test_the_catalogue_lists_no_guide_for_an_experiment_it_lacks():
    assert set(learning.GUIDES) <= set(registry.EXPERIMENTS)
    assert set(learning.START_HERE) | set(learning.GOING_FURTHER) | set(learning.THE_MACHINE) \
        == set(learning.GUIDES)


def test_start_here_builds_up_from_data_parallel(client):
    page = client.get("/experiments")
    assert page.status_code == 200
    assert_strict_page(page)
    path = re.search(r'<ol class="path">(.*?)</ol>', page.text, re.S)[1]
    steps = [attrs["href"] for attrs, _ in Elements(path).all("a", "path-title")]
    assert steps == ["#data_parallel", "#pipeline", "#tensor_parallel", "#zero", "#mesh"]
    assert "All at once" not in path  # the combined step (mesh) ends the path now
    then = re.search(r'<p class="hint">Then: (.*?)</p>', page.text, re.S)[1]
    assert [attrs["href"] for attrs, _ in Elements(then).all("a")] == \
        ["#recompute", "#sequence", "#experts"]


def test_the_first_run_opens_the_form_filled_in_small(client):
    page = client.get("/experiments/pipeline/run?first=1")
    assert page.status_code == 200
    assert "finish in seconds on a CPU" in page.text
    assert "What you will see:" in page.text and 'class="diagram"' in page.text
    inputs = parse(page.text).inputs
    assert inputs["param.steps"][0]["value"] == "5"
    assert inputs["param.micro_batches"][0]["value"] == "4"
    checked = [i["value"] for i in inputs["param.strategies"] if "checked" in i]
    assert checked == ["naive_mp", "gpipe", "1f1b"]
    assert 'value="cpu" selected' in page.text
    plain = client.get("/experiments/pipeline/run")
    assert "finish in seconds" not in plain.text
    assert parse(plain.text).inputs["param.steps"][0]["value"] == "5"


def test_the_pipeline_says_before_the_run_what_a_cpu_cannot_show_and_a_gpu_would(client):
    """Pipelining needs each stage to have its own core or GPU, and micro-batches that
    outweigh their fixed cost: the form and the catalogue say both before the run, with
    the calculator's prediction for GPUs, and the link opens the calculator on the
    pipelined configuration, whose answer is the sentence's."""
    guide = learning.guide("pipeline")
    for url in ("/experiments/pipeline/run?first=1", "/experiments"):
        page = client.get(url).text
        assert "need not beat naive model parallel" in page
        assert "message handshake" in page and "take turns" in page
        assert guide.elsewhere.replace("~", "") in page.replace("~", "")
    link = re.search(r'href="(/calculator\?[^"]+)">See it in the calculator', page)
    answer = client.get("/api/v1/calculator?" + link.group(1).split("?", 1)[1].replace(
        "&amp;", "&")).get_json()
    assert answer["parallel"]["micro_batches"] == 16 and answer["parallel"]["pp"] == 4
    assert f"in {answer['time']['step_time_s']:.2f} s as GPipe" in guide.elsewhere
    assert client.get(link.group(1).replace("&amp;", "&")).status_code == 200


def test_the_first_run_queues_as_shown(client):
    params = learning.first_run("data_parallel")
    response = client.post("/experiments/data_parallel/run",
                           data=form_for("data_parallel", **params))
    assert response.status_code == 303
    run = client.get(response.location.replace("/runs/", "/api/v1/runs/")).get_json()
    assert run["params"] == params


def test_viewers_read_the_guides_but_get_no_run_buttons(served):
    page = served.as_user(VIEWER)("get", "/experiments").text
    assert "What you will see:" in page and "?first=1" not in page
    assert "?first=1" in served.as_user(OWNER)("get", "/experiments").text
