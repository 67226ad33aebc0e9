"""The sharding view on run pages and new-run forms: real finished CPU lab runs stored as
the runner stores them, the pages fetched through the app, and the HTML read back: one
panel per strategy, tiles coloured by their owners, per-rank bytes against what the run
measured. Odd results and odd form values render less, never a 500."""

from __future__ import annotations

import json
import re
from html import unescape

import pytest

from app.journal import runs
from app.journal.views import sharding
from app.models import Run
from jobs.lab.catalogue import registry
from jobs.lab.predict.layout import layout, nbytes
from tests.helpers import OWNER, VIEWER
from tests.real_runs import lab_output, store_run

TRAINING = ["data_parallel", "pipeline", "tensor_parallel", "zero"]


def section(html: str) -> str:
    """The sharding view of a page ("" when it has none)."""
    start = html.find('<section class="shard-section"')
    return html[start:html.index("</section>\n", start)] if start >= 0 else ""


def view(client, run_id: int, query: str = "") -> str:
    """A run page's sharding view with every strategy's panel in it, in the switch's order:
    the page draws one, the others are fetched alone as app/static/sharding.js does."""
    page = client.get(f"/runs/{run_id}{query}")
    assert page.status_code == 200
    html = section(page.get_data(as_text=True))
    sources = [unescape(src) for src in re.findall(r'data-src="([^"]+)"', html)]
    if not sources:
        return html
    fetched = []
    for src in sources:
        response = client.get(src)
        assert response.status_code == 200 and response.mimetype == "text/html", src
        fetched.append(response.get_data(as_text=True))
    start = html.index('<section class="shard-panel"')
    end = html.index("</section>", start) + len("</section>")
    assert html[start:end] in fetched  # the page's panel is the one served alone
    return html[:start] + "".join(fetched) + html[end:]


def panels(html: str) -> dict[str, str]:
    parts = re.split(r'<section class="shard-panel" [^>]*data-strategy="([^"]+)">', html)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def tiles(panel: str) -> list[dict[str, str]]:
    """Every tile's data-* attributes, and the rank classes its bar is coloured with."""
    out = []
    for m in re.finditer(r'<button type="button" class="shard-tile[^"]*"([^>]*)>(.*?)</button>',
                         panel, re.S):
        data = {k: unescape(v) for k, v in re.findall(r'data-(\w+)="([^"]*)"', m[1])}
        data["fills"] = sorted(set(re.findall(r'<rect class="(r\d|all)"', m[2])))
        if "of" not in data:  # a collapsed run's own blocks point at their row's tiles
            out.append(data)
    return out


@pytest.fixture
def stored(tmp_path_factory, app):
    def store(experiment: str) -> tuple[int, dict]:
        out = lab_output(tmp_path_factory, experiment)
        return store_run(app, experiment, out), json.loads((out / "result.json").read_text())
    return store


@pytest.mark.parametrize("experiment", TRAINING)
def test_a_run_page_shows_every_strategy_it_compared(client, stored, experiment):
    run_id, result = stored(experiment)
    page = client.get(f"/runs/{run_id}")
    assert page.status_code == 200
    assert "sharding.js" in page.get_data(as_text=True)
    drawn = view(client, run_id)
    assert 'id="sharding-h"' in drawn
    assert "style=" not in drawn
    shown = panels(drawn)
    assert list(shown) == [s["strategy"] for s in result["strategies"]]
    for entry in result["strategies"]:
        panel = shown[entry["strategy"]]
        found = tiles(panel)
        assert found and all(t["owners"] and t["comm"] and t["shape"] for t in found)
        # every tensor of the model has a tile (a collapsed row stands for its blocks)
        names = {t["name"] for t in found}
        assert {"wte.weight", "wpe.weight", "ln_f.weight", "head.weight"} <= names
        # the per-rank table says what the run measured, beside the layout's own count
        measured = [m["measured"]["params"] for m in entry["memory"]]
        for value in measured:
            assert f'<td class="num">{nbytes(value)}</td>' in panel
    assert f"{result['model']['params']:,} parameters" in drawn


def test_the_owners_follow_the_strategy(client, stored):
    run_id, _ = stored("zero")
    shown = panels(view(client, run_id))
    ddp = {t["name"]: t for t in tiles(shown["ddp"])}
    assert ddp["wte.weight"]["fills"] == ["all"]
    assert "every rank, a full copy" in ddp["wte.weight"]["owners"]
    assert "all-reduced by DDP's reducer in bucket" in ddp["wte.weight"]["comm"]
    fsdp = {t["name"]: t for t in tiles(shown["fsdp2"])}
    assert fsdp["wte.weight"]["fills"] == ["r0", "r1"]  # 64 rows: 32 each
    assert "rank 0: rows 0–31 (32 × 32)" in fsdp["wte.weight"]["owners"]
    assert "all-gathered" in fsdp["attn.q.weight"]["comm"].lower()
    zero1 = tiles(shown["zero1"])
    assert any(t["fills"] == ["r0", "r1"] for t in zero1)  # a bucket's border inside one
    assert all("reduce-scattered in bucket" in t["comm"] for t in zero1)


def test_zero3_tiles_say_that_each_rank_keeps_its_slice_of_everything(client, stored):
    run_id, _ = stored("zero")
    shown = panels(view(client, run_id))
    zero3 = tiles(shown["zero3"])
    owned = [t for t in zero3 if "rank 0:" in t["owners"]]
    assert owned and all("its parameters, gradient and optimizer state" in t["owners"]
                         and "of the optimizer state" not in t["owners"] for t in owned)
    blocks = [t for t in zero3 if "with the rest of" in t["comm"]]
    assert blocks and all("[block" not in t["comm"] for t in blocks)
    assert any("with the rest of its block" in t["comm"] for t in blocks)
    zero1 = tiles(shown["zero1"])  # ZeRO-1 still says what it shards
    assert any("of the optimizer state" in t["owners"] for t in zero1)


def test_tensor_parallel_tiles_are_halves(client, stored):
    run_id, _ = stored("tensor_parallel")
    drawn = view(client, run_id)
    assert "blocks 0–3" in drawn and "×4" in drawn  # identical blocks collapse
    megatron = {t["name"]: t for t in tiles(panels(drawn)["tp_megatron"])}
    q, proj = megatron["attn.q.weight"], megatron["attn.proj.weight"]
    assert q["fills"] == proj["fills"] == ["r0", "r1"]
    assert "rank 1: rows 16–31 (16 × 32)" in q["owners"]
    assert "rank 1: columns 16–31 (32 × 16)" in proj["owners"]
    assert "f (identity forward" in q["comm"] and "g all-reduces" in proj["comm"]
    assert megatron["ln1.weight"]["fills"] == ["all"]
    assert megatron["attn.q.bias"]["held"] == "rank 0: 64 B · rank 1: 64 B"  # 16 each


def test_pipeline_stages_colour_whole_blocks(client, stored):
    run_id, result = stored("pipeline")
    shown = panels(view(client, run_id))
    gpipe = tiles(shown["gpipe"])
    by_name = {t["name"]: t for t in gpipe}
    assert by_name["wte.weight"]["fills"] == ["r0"] and by_name["head.weight"]["fills"] == ["r1"]
    assert by_name["blocks.1.attn.q.weight"]["fills"] == ["r0"]
    assert by_name["blocks.2.attn.q.weight"]["fills"] == ["r1"]
    assert "Activation" in by_name["blocks.1.attn.q.weight"]["comm"]
    assert "sent to rank 1 after the forward of each micro-batch" in shown["gpipe"]
    lay = layout(result["model"], "gpipe", 2, micro_batches=4, batch_size=8)
    for r, value in enumerate(lay.held_bytes()):
        assert f'<td class="num">{nbytes(value)}</td>' in shown["gpipe"], r


def test_a_run_page_draws_one_panel_and_links_the_others(client, stored):
    """The page carries the panel first seen; each other strategy is a link to the page
    showing it (no script needed) and to its panel alone (data-src)."""
    run_id, result = stored("zero")
    names = [s["strategy"] for s in result["strategies"]]
    assert len(names) >= 4
    page = client.get(f"/runs/{run_id}").get_data(as_text=True)
    assert list(panels(section(page))) == names[:1]
    links = re.findall(r'<a href="([^"]+)" data-src="([^"]+)"( aria-current="true")?>([^<]+)'
                       r"</a>", section(page))
    assert [name for *_, name in links] == names
    assert [bool(current) for _, _, current, _ in links] == [True] + [False] * (len(names) - 1)
    for href, src, _, name in links:
        assert unescape(href) == f"/runs/{run_id}?sharding={name}#shard-run"
        assert unescape(src) == f"/runs/{run_id}/sharding/{name}"
    picked = section(client.get(f"/runs/{run_id}?sharding=zero2").get_data(as_text=True))
    assert list(panels(picked)) == ["zero2"]
    assert 'aria-current="true">zero2</a>' in picked
    # a strategy the run lacks shows the first, as a bare page does
    odd = client.get(f"/runs/{run_id}?sharding=%3Cb%3Epp").get_data(as_text=True)
    assert list(panels(section(odd))) == names[:1] and "<b>pp" not in odd

    # the page weighs less than half of what it would with every panel inline
    every = view(client, run_id)
    assert len(page) < (len(page) - len(section(page)) + len(every)) / 2


def test_a_panel_alone_is_there_only_for_a_strategy_the_run_has(client, stored):
    run_id, _ = stored("zero")
    for path in (f"/runs/{run_id}/sharding/pp", f"/runs/{run_id}/sharding/DDP",
                 f"/runs/{run_id + 999}/sharding/ddp", f"/runs/{run_id}/sharding/"):
        response = client.get(path)
        assert response.status_code == 404, path
        assert "shard-panel" not in response.get_data(as_text=True)
    mfu, _ = stored("gpt_mfu")
    assert client.get(f"/runs/{mfu}/sharding/single").status_code == 200
    collectives, _ = stored("collectives")  # no model: no view, no panel
    assert client.get(f"/runs/{collectives}/sharding/single").status_code == 404


def test_a_panel_alone_is_read_as_its_run_page_is(served):
    with served.db.write() as session:
        run = runs.create(session, "pipeline", {"world_size": 2, "layers": 2,
                                                "strategies": ["gpipe", "1f1b"]}, actor="test")
        session.flush()
        path = f"/runs/{run.id}/sharding/1f1b"
    for login, status in ((OWNER, 200), (VIEWER, 200), ("eve@x", 403), (None, 403)):
        assert served.as_user(login)("get", path).status_code == status, login
        assert served.as_user(login)("get", path[:path.index("/sharding")]).status_code \
            == status, login
    panel = served.as_user(VIEWER)("get", path)
    assert 'data-strategy="1f1b"' in panel.text and panel.headers["ETag"]


def test_one_strategy_needs_no_switch_and_no_model_shows_nothing(client, stored):
    mfu, _ = stored("gpt_mfu")
    view = section(client.get(f"/runs/{mfu}").get_data(as_text=True))
    assert list(panels(view)) == ["single"] and "shard-pick" not in view
    for experiment in ("collectives", "gemm_roofline"):
        run_id, _ = stored(experiment)
        page = client.get(f"/runs/{run_id}")
        assert page.status_code == 200 and section(page.get_data(as_text=True)) == ""


@pytest.mark.parametrize("result", [
    None, {"model": "gpt"}, {"model": {"kind": "rnn"}},
    {"model": {"kind": "gpt", "layers": -1}}, {"model": {"kind": "gpt", "hidden": 10**9}},
    {"model": {"kind": "gpt", "hidden": 65, "heads": 4}},
    {"strategies": "ddp"}, {"strategies": [None, 3, {"strategy": 7}]},
    {"strategies": [{"strategy": "warp_drive", "ranks": 2}]},
    {"strategies": [{"strategy": "ddp", "ranks": "two", "memory": [{"measured": 5}]}]},
    {"strategies": [{"strategy": "gpipe", "ranks": 64}]},
])
def test_odd_results_render_less_never_a_500(app, client, stored, result):
    run_id, _ = stored("zero")
    with app.extensions["db"].write() as session:
        session.get(Run, run_id).result = result
    page = client.get(f"/runs/{run_id}")
    assert page.status_code == 200
    assert "style=" not in section(page.get_data(as_text=True))
    for params in ({"world_size": "2"}, {"strategies": "ddp"}, {"micro_batches": 0}, []):
        assert isinstance(sharding.for_run("zero", params, result), str)


@pytest.mark.parametrize("experiment", TRAINING + ["gpt_mfu"])
def test_the_form_compares_every_strategy_it_offers(client, experiment):
    page = client.get(f"/experiments/{experiment}/run")
    assert page.status_code == 200
    view = section(page.get_data(as_text=True))
    spec = registry.describe(experiment)
    offered = spec["params"]["strategies"]["choices"] if "strategies" in spec["params"] \
        else ["single"]
    assert list(panels(view)) == offered
    assert ("shard-pick" in view) == (len(offered) > 1)
    for panel in panels(view).values():
        assert tiles(panel)


def test_the_form_says_why_a_strategy_cannot_lay_it_out(client):
    # refused by the registry (heads % world_size), shown again with its values: the view
    # says which strategies cannot split 4 heads over 3 ranks
    page = client.post("/experiments/tensor_parallel/run",
                       data={"param.world_size": "3", "param.strategies": ["single",
                                                                           "tp_megatron"]})
    assert page.status_code == 422
    view = section(page.get_data(as_text=True))
    assert "tp_megatron: 4 heads cannot be split over 3 ranks" in view
    assert list(panels(view)) == ["single"]
    typed = client.post("/experiments/zero/run", data={"param.hidden": "wide"})
    assert typed.status_code == 422 and section(typed.get_data(as_text=True)) == ""
    assert client.get("/experiments/collectives/run").status_code == 200
    assert section(client.get("/experiments/collectives/run").get_data(as_text=True)) == ""


def test_a_queued_run_shows_the_layout_its_parameters_ask_for(app, client):
    with app.extensions["db"].write() as session:
        run = runs.create(session, "pipeline", {"world_size": 2, "layers": 6,
                                                "strategies": ["gpipe", "1f1b"]}, actor="test")
        session.flush()
        run_id = run.id
    drawn = view(client, run_id)
    assert list(panels(drawn)) == ["gpipe", "1f1b"]
    # 6 blocks on 2 stages (0-2, 3-5): the boundary blocks 2 and 3 have rows of their own
    for span in ("0–1", "4–5"):
        assert f'blocks {span}</strong> <span class="shard-times">×2</span>' in drawn
    assert "measured" not in drawn
