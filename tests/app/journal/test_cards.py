"""Result cards on real finished lab runs (tests/real_runs.py): a chart on every card, memory
per rank, per-step curves, the pipeline's stages; the card in the Atom feed as an image
served at /runs/<id>/card.svg; and cards that never break a page whatever a runner sent.
What a card says in words is tested in test_lessons.py."""

from __future__ import annotations

import copy
import json
import re
import xml.etree.ElementTree as ET
from html import escape

import feedparser
import pytest

from app.journal import numbers, posting, results
from app.journal.views import card_training, cards
from app.models import Run
from app.notebook import atom
from tests.helpers import OWNER, TAILNET_PEER, add_token, load, login_header
from tests.real_runs import lab_output, store_run

EXPERIMENTS = ["pipeline", "zero", "data_parallel", "collectives", "gemm_roofline", "gpt_mfu"]
NUMBER = re.compile(r"\d")


def result_of(tmp_path_factory, experiment: str) -> dict:
    return json.loads((lab_output(tmp_path_factory, experiment) / "result.json").read_text())


def card_of(app, tmp_path_factory, experiment: str) -> tuple[int, str]:
    run_id = store_run(app, experiment, lab_output(tmp_path_factory, experiment))
    return run_id, cards.card(load(app.extensions["db"], Run, run_id))


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_card_has_a_chart_a_lesson_and_an_image_for_the_feed(app, tmp_path_factory,
                                                                    experiment):
    run_id, html = card_of(app, tmp_path_factory, experiment)
    svgs = re.findall(r"<svg class=\"card-chart\"[^>]*>", html)
    assert svgs and all('role="img"' in s and "aria-label=" in s for s in svgs)
    assert html.count("<title>") >= len(svgs)
    assert "style=" not in html and "<script" not in html  # strict CSP, stored as it is
    lesson = re.search(r'<p class="card-lesson">(.*?)</p>', html, re.S)
    sentences = [s for s in re.split(r"(?<=[.!?])\s+(?=[A-Z0-9a-z_])", lesson[1]) if s]
    assert 2 <= len(sentences) <= 4, sentences
    assert all(NUMBER.search(s) for s in sentences), sentences  # numbers, never canned text
    image = re.search(rf'data-feed-img="/runs/{run_id}/card\.svg\?v=([0-9a-f]{{16}})"', html)
    svg, digest = cards.image(load(app.extensions["db"], Run, run_id))
    assert image and image[1] == digest
    root = ET.fromstring(svg.encode())  # a well-formed standalone document
    assert root.tag.endswith("svg") and root.get("role") == "img"
    assert "style=" not in svg and "<script" not in svg and "currentColor" not in svg


def test_a_training_card_shows_key_numbers_first_and_the_rest_behind_details(app,
                                                                           tmp_path_factory):
    _, html = card_of(app, tmp_path_factory, "pipeline")
    keys = html.index('class="run-table card-keys"')
    assert keys < html.index("<details>")
    header = re.search(r'card-keys"><thead>(.*?)</thead>', html, re.S)[1]
    assert len(re.findall("<th", header)) == 5  # strategy, ok, step, meas/pred, tokens/s
    for summary in ("Step time and loss, step by step", "Pipeline: bubble and stages",
                    "Each strategy in detail"):
        assert f"<summary>{summary}</summary>" in html
    assert "Step time per strategy" in html and "Memory per rank" in html


def test_the_lab_records_each_timed_step(tmp_path_factory):
    result = result_of(tmp_path_factory, "pipeline")
    steps = result["params"]["steps"]
    for s in result["strategies"]:
        per_step = s["per_step"]
        # at least the steps asked, more while their spread was wide (timing.py)
        assert [p["step"] for p in per_step] == list(range(len(per_step)))
        assert len(per_step) >= steps == min(steps, s["step_time_s"]["n"])
        times = [p["time_s"] for p in per_step]
        assert min(times) <= s["step_time_s"]["median"] <= max(times) and min(times) > 0
        losses = [p["loss"] for p in per_step]
        # the same batch every step: the loss falls, as the gate's reference loss does
        assert losses[-1] < losses[0] and abs(losses[0] - 4.2) < 1.5


def test_per_step_curves_and_numbers_are_in_the_card(tmp_path_factory):
    result = result_of(tmp_path_factory, "zero")
    html = card_training.per_step(result["strategies"])
    assert html.count('<svg class="card-chart"') == 2
    first = result["strategies"][0]
    assert numbers.seconds(first["per_step"][0]["time_s"]) in html
    assert f"{first['per_step'][-1]['loss']:.4g}" in html


def test_the_numbers_step_by_step_say_when_they_are_the_first_ones():
    def timed(name, n):
        return {"strategy": name, "per_step": [{"step": i, "time_s": 0.01 * (i + 1),
                                                "loss": 4 - i / 10} for i in range(n)]}
    html = card_training.per_step([timed("ddp", 20), timed("zero1", 12)])
    ddp, zero1 = re.findall(r"<dd>(.*?)</dd>", html)
    assert ddp.startswith("the first 12 of 20 timed steps: 10 ms, 20 ms,") and "130 ms" not in ddp
    assert zero1.startswith("10 ms, 20 ms,") and "of 12" not in zero1


def test_what_the_model_leaves_out_is_named_only_beside_a_step_slower_than_its_price():
    """As a learner saw the first runs' cards: "−2 ms (−40%) not modelled: Python between
    the operators…" beside zero2, which ran faster than priced - a cost the model leaves
    out cannot make a step faster than its price."""
    def strategy(name, measured, residual):
        return {"strategy": name, "correctness": {"passed": True},
                "step_time_s": {"median": measured},
                "prediction": {"step_time_s": measured - residual, "residual_s": residual,
                               "residual_fraction": residual / measured,
                               "unmodelled": ["Python between the operators"]}}
    html = card_training.body({"strategies": [strategy("zero2", 0.00495, -0.002),
                                              strategy("zero3", 0.018, 0.0016)]}).html
    zero2, zero3 = re.findall(r"<dt>unexplained</dt><dd>(.*?)</dd>", html)
    assert zero2 == ("−2 ms (−40%) <small>faster than priced: the model overestimates this "
                     "step</small>")
    assert zero3 == "+1.6 ms (+9%) <small>not modelled: Python between the operators</small>"


def test_the_dense_baseline_says_its_moe_time_is_from_its_own_loop():
    """As a learner saw the first experts run: "Dense baseline, …: 112 ms a step against
    the MoE's 26 ms (0.23×)" under a table giving ep_alltoall 42 ms a step, with nothing to
    say the 26 ms came from the baseline's own alternating loop, nor which way 0.23× ran."""
    from app.journal.views.card_experts import experts
    extra = {"load_per_expert": [[12, 17, 9, 26]], "kept_per_expert": [[12, 16, 9, 9]],
             "drop_fraction": 0.27,
             "dense_baseline": {"what": "the dense GPT", "step_time_s": 0.112,
                                "moe_step_time_s": 0.026, "steps": 3}}
    html = experts([{"strategy": "ep_alltoall", "extra": [extra]}])
    assert ("<p>Dense baseline, the dense GPT: timed step for step beside ep_alltoall (3 steps "
            "each, apart from the step times above), 112 ms a step against ep_alltoall's 26 ms "
            "there: ep_alltoall takes 0.23× the dense step</p>") in html


def test_an_invalid_mfu_and_an_outlier_are_said_so_not_published(tmp_path_factory):
    """As the owner saw it: the peak probed at 17.8 GFLOP/s, MFU 445%; one step of 721 ms
    among quick ones. The figures are set so; the rest is the run's own."""
    result = copy.deepcopy(result_of(tmp_path_factory, "zero"))
    s = result["strategies"][0]
    s["mfu"].update(value=4.45, valid=False)
    s["invalid"] = ["MFU 445% is above 100%, which no step can reach"]
    s["per_step"][0].update(time_s=0.721, outlier=True)
    s["step_time_s"]["outliers"] = [0]
    html = card_training.body(result).html
    assert '<ul class="card-warn" role="note">' in html
    assert html.index("card-warn") < html.index("<details>")
    assert "MFU 445% is above 100%" in html and "445%</dd>" not in html
    assert "invalid (see above)" in html
    assert "721 ms (outlier)" in html and "1 outlier marked" in html
    assert "721 ms" not in card_training.step_chart(result["strategies"]).body


def test_memory_per_rank_is_measured_beside_predicted_for_every_strategy(tmp_path_factory):
    result = result_of(tmp_path_factory, "zero")
    chart = card_training.memory_chart(result["strategies"])
    for s in result["strategies"]:
        for m in s["memory"]:
            assert f"{s['strategy']} · rank {m['rank']}" in chart.body
            assert numbers.si(m["peak"]["measured"], "B") in chart.body or \
                numbers.si(sum(m["measured"][k] for k in ("params", "grads", "optimizer"))
                          + m["saved_activation_peak_bytes"], "B") in chart.body
    assert all(escape(k) in chart.body for k in card_training.MEMORY_KEYS)


def test_the_feed_shows_the_card_as_an_image_and_a_summary(app, client, tmp_path_factory):
    run_id = store_run(app, "pipeline", lab_output(tmp_path_factory, "pipeline"))
    assert posting.post_cards(app.extensions["db"], "UTC") == [run_id]
    feed = feedparser.parse(client.get("/feed.atom").data)
    assert not feed.bozo, feed.get("bozo_exception")
    content = next(e for e in feed.entries if f"/runs/{run_id}" in e.content[0].value)
    html = content.content[0].value
    assert "<svg" not in html and "<details" not in html and "<table" not in html
    img = re.search(r"<img [^>]*>", html)[0]  # (feedparser made its address absolute)
    src = re.search(rf'src="http://localhost(/runs/{run_id}/card\.svg\?v=[0-9a-f]{{16}})"', img)
    assert src and 'alt="Step time measured (predicted)' in img
    assert 'class="card-lesson"' in html  # the summary in words travels with the image
    image = client.get(src[1])
    assert image.status_code == 200 and image.mimetype == "image/svg+xml"
    assert image.headers["Content-Security-Policy"].startswith("default-src 'none'")
    assert "immutable" in image.headers["Cache-Control"]
    again = client.get(src[1], headers={"If-None-Match": image.headers["ETag"]})
    assert again.status_code == 304
    assert "no-cache" in client.get(f"/runs/{run_id}/card.svg?v=stale").headers["Cache-Control"]
    # the page keeps its inline charts: only the feed swaps them
    page = client.get(f"/runs/{run_id}").text
    assert '<svg class="card-chart"' in page


def test_a_feed_token_reads_the_card_images_of_published_entries_only(make_app,
                                                                      tmp_path_factory):
    app = make_app(AUTH_MODE="serve", OWNERS=[OWNER])
    db = app.extensions["db"]
    secret = add_token(db, "reader", "feed")
    run_id = store_run(app, "zero", lab_output(tmp_path_factory, "zero"))
    assert posting.post_cards(db, "UTC") == [run_id]
    unposted = store_run(app, "gpt_mfu", lab_output(tmp_path_factory, "gpt_mfu"))  # in no entry
    client, peer = app.test_client(), {"environ_base": TAILNET_PEER}
    feed = feedparser.parse(client.get(f"/feed.atom?token={secret}", **peer).data)
    html = feed.entries[0].content[0].value
    src = re.search(rf"/runs/{run_id}/card\.svg\?v=[0-9a-f]{{16}}&(?:amp;)?token=([^\"]+)\"",
                    html)
    assert src and src[1] == secret
    image = client.get(f"/runs/{run_id}/card.svg?token={secret}", **peer)
    assert image.status_code == 200 and image.mimetype == "image/svg+xml"
    # a feed reader's page, on its own origin, may show it; an owner's request stays ours
    assert image.headers["Cross-Origin-Resource-Policy"] == "cross-origin"
    owners = client.get(f"/runs/{run_id}/card.svg", headers=login_header(OWNER))
    assert owners.status_code == 200
    assert owners.headers["Cross-Origin-Resource-Policy"] == "same-origin"
    assert client.get(f"/runs/{run_id}/card.svg", **peer).status_code == 403  # no token
    assert client.get(f"/runs/{run_id}?token={secret}", **peer).status_code == 403  # the page
    assert client.get(f"/runs/{run_id}/card.svg?token=wrong", **peer).status_code == 403
    assert client.get(f"/runs/{unposted}/card.svg?token={secret}", **peer).status_code == 404


def test_for_feed_keeps_images_on_this_site():
    inner = '<table><tr><td>x</td></tr></table><div>nested</div>'
    marked = atom.feed_alternative(inner, "/runs/3/card.svg?v=abc123", 'a "quoted" alt')
    out = atom.for_feed(f"<p>before</p>{marked}<p>after</p>", token="t&k")
    assert out == ('<p>before</p><p><img src="/runs/3/card.svg?v=abc123&amp;token=t%26k" '
                   'alt="a &quot;quoted&quot; alt"></p><p>after</p>')
    with pytest.raises(ValueError):
        atom.feed_alternative(inner, "//evil.example/x.svg", "")
    forged = ('<div class="feed-alternative" data-feed-img="//evil.example/x.svg" '
              'data-feed-alt="">x</div><!--/feed-alternative-->')
    assert atom.for_feed(forged, token="secret") == forged  # not ours: left alone


NAN, INF = float("nan"), float("inf")
# As big as a result can be (the runner API refuses one over MAX_RESULT_BYTES; the test
# below checks that it takes this one): 64 strategies, 64 ranks each, 1,000 steps each.
BIGGEST = {"strategies": [{"strategy": f"s{i}", "correctness": {"passed": True},
                           "step_time_s": {"median": 1e-3 * (i + 1)},
                           "prediction": {"step_time_s": 1e-3, "terms_s": {"comm": 1e-3}},
                           "memory": [{"rank": r, "peak": {"measured": 1e9, "predicted": 1e9},
                                       "measured": {"params": 1e8, "total": 1e8},
                                       "predicted": {"params": 1e8, "total": 1e8}}
                                      for r in range(64)],
                           "per_step": [{"step": k, "time_s": 1e-3, "loss": 1.0}
                                        for k in range(1000)],
                           "tokens_per_s": 1e308} for i in range(64)]}
HOSTILE = [
    {"strategies": "not a list"},
    {"strategies": [None, 3, "x", [], {"strategy": None}]},
    {"strategies": [{"strategy": "<script>alert(1)</script>", "label": {"a": 1},
                     "correctness": {"passed": True, "steps_checked": "3"},
                     "step_time_s": {"median": NAN, "p10": INF},
                     "prediction": {"step_time_s": -1, "terms_s": {"comm": "x", "gemm": NAN},
                                    "unmodelled": "not a list", "residual_s": True},
                     "memory": [{"peak": "x", "measured": [1]}, None, {"rank": {"r": 1}}],
                     "per_step": [1, {"step": "a", "time_s": None}, {"step": 1, "loss": INF}],
                     "bubble": {"measured_idle_fraction": "x"}, "extra": "x",
                     "tokens_per_s": -5, "ratios": None, "mfu": [1]}]},
    BIGGEST,
    {"experiment": "collectives", "fits": {"all_reduce": {"alpha_s": -1, "busbw_Bps": 0},
                                           "x": None, "<b>": {"alpha_s": 1e-300,
                                                              "busbw_Bps": 1e308}},
     "table": [{"op": "all_reduce", "bytes": b, "busbw_Bps": v} for b, v in
               [(0, 1), (-1, 5), (1e308, 1e308), ("x", NAN), (1024, 1e-300)]] + [None, 7]},
    {"fits": {"all_reduce": {"alpha_s": 1e-4, "busbw_Bps": 1e9, "fallback": ["x"]},
              "all_gather": {"alpha_s": 1e-4, "busbw_Bps": 1e9,
                             "fallback": "<script>alert(1)</script>" * 100}},
     "factors": {"all_reduce": 0},
     "table": [{"op": "all_reduce", "bytes": 1024, "busbw_Bps": 1e6}] * 3},
    {"table": [{"M": "<script>", "flops_per_s": 1e308, "intensity_flop_per_byte": 1e-308}],
     "peak_flops": 1e308, "copy_bandwidth_Bps": 1e-308},
    {"strategies": [{"strategy": "a", "correctness": {"passed": True}, "mfu": {"valid": False},
                     "invalid": [{"x": 1}, "<b>"], "per_step": [{"step": 0, "outlier": 1}],
                     "step_time_s": {"median": 0.01, "n": "x", "outliers": "x", "stopped": 5,
                                     "iqr_fraction": NAN}}]},
    {"table": "x", "peak_flops": NAN},
    {"mfu": "x", "achieved_flops": INF, "peak_flops": 0, "loss_first_last": ["a", None]},
    {"mfu": 0.5, "achieved_flops": 1.0, "peak_flops": 2.0, "peak_name": "<img src=x>",
     "model": {"hidden": "64"}, "step_time_s": {"median": 0}},
]


def _stored_card(db, experiment: str, result: dict) -> tuple[int, str]:
    """A finished two-rank run that sent `result`: its id and its card."""
    with db.write() as session:
        run = Run(experiment=experiment, params={"world_size": 2}, status="SUCCEEDED",
                  result=result, environment={"device": "cpu"})
        session.add(run)
        session.flush()
        run_id = run.id
    return run_id, cards.card(load(db, Run, run_id))


def test_a_collectives_card_says_its_fit_fell_back(app, db):
    """A result whose fit says it fell back: the card's lesson says so, with the reason
    (one written before the fit said so is read by its error: test_lessons.py)."""
    why = ("the times did not grow with the size, so W is a thousand times the largest "
           "sample's bus bandwidth")
    result = {"experiment": "collectives",
              "fits": {"all_reduce": {"alpha_s": 3e-4, "busbw_Bps": 2e11,
                                      "rms_rel_error": 0.1, "fallback": why}},
              "table": [{"op": "all_reduce", "bytes": 65536, "time_s": 3e-4,
                         "busbw_Bps": 65536 / 3e-4}]}
    assert results.check_result(result)  # a runner can send it
    _, html = _stored_card(db, "collectives", result)
    assert escape(f"all_reduce: no α–β line fits the samples ({why})") in html
    assert "bus bandwidth W =" not in html


@pytest.mark.parametrize("result", HOSTILE, ids=range(len(HOSTILE)))
def test_a_card_renders_whatever_a_runner_sent(app, client, db, result):
    if result is BIGGEST:
        assert results.check_result(result)  # a runner can send it (it reads, never changes)
    run_id, html = _stored_card(db, "data_parallel", result)
    assert "could not be drawn" not in html  # handled, not caught
    assert "<script" not in html and "<img src=x" not in html and "<b>" not in html
    assert len(html) < 3_000_000
    page = client.get(f"/runs/{run_id}")
    assert page.status_code == 200
    assert client.get(f"/runs/{run_id}/card.svg").status_code in (200, 404)
