"""The what-if calculator: its numbers are the lab's cost model's (jobs/lab/predict/cost.py,
memory.py called directly here), the published reference points hold, every bad
input is a 4xx naming its field, and the page works without JavaScript. A runner's own
calibration and "Run this here": tests/app/web/test_calculator_lab.py. The browser half is
tests/browser/test_calculator_page.py."""

from __future__ import annotations

import json
import re

import pytest

from jobs.lab.predict import cost, memory, whatif
from jobs.lab.predict.calibration import LinkFit
from tests.helpers import OWNER, VIEWER, parse
from tests.strict_pages import assert_strict_page

H100 = whatif.GPUS["h100"]


def ask(client, **inputs) -> dict:
    response = client.post("/api/v1/calculator", json=inputs)
    assert response.status_code == 200, response.text
    return response.json


# -- the cost model's numbers -------------------------------------------------------------


@pytest.mark.parametrize("precision", ["bf16_adamw", "fp32_sgd"])
@pytest.mark.parametrize("zero,dp", [(0, 1), (0, 8), (1, 8), (2, 4), (3, 8)])
def test_memory_is_the_memory_models(client, precision, zero, dp):
    a = ask(client, model="1b", precision=precision, zero=zero, dp=dp, batch_size=64,
            micro_batches=4)
    L, h, s, v, heads = 18, 2048, 2048, 50257, 16
    P = cost.param_count("gpt", L, h, s, v, tied=True)
    assert a["model"]["params"] == P == a["memory"]["params_held"]
    state = memory.model_state(precision, P, stage=zero, d=dp)
    parts = a["memory"]["parts_bytes"]
    assert [parts[k] for k in ("params", "grads", "optimizer")] == pytest.approx(
        [state["params"], state["grads"], state["optimizer"]])
    e = memory.element_bytes(precision)
    n = 64 // (dp * 4) * s
    assert parts["activations"] == pytest.approx(
        memory.activations("gpt", L, n, h, heads, v, e))
    assert a["memory"]["total_bytes"] == pytest.approx(sum(parts.values()))


def test_tensor_and_pipeline_ranks_hold_the_cost_models_share(client):
    a = ask(client, model="7b", dp=1, tp=4, pp=4, zero=0, batch_size=32, micro_batches=8)
    L, h, s, v = 32, 4096, 4096, 32000
    split, replicated = cost.tp_split_params(L, h, s, v)
    held = [r["params_held"] for r in a["memory"]["per_stage"]]
    assert held == [cost.rank_params(L, h, s, v, t=4, p=4, rank=r) for r in range(4)]
    # over the stages, a tensor-parallel rank holds its split share and every replica
    assert sum(held) == split // 4 + replicated
    first = a["memory"]["per_stage"][0]
    assert first["micro_batches_in_flight"] == 4  # 1F1B: p - rank
    assert first["parts_bytes"]["activations"] == pytest.approx(4 * memory.activations(
        "gpt", 8, 4 * s, h, 32, v, 2, t=4, first=True, last=False))  # b = 32 / 8


def test_step_time_is_the_cost_models_pipeline(client):
    """Compute from the cost model's FLOPs per rank at the achieved FLOP/s, the optimizer's
    memory traffic, TP all-reduces and sends through LinkFit: cost.predict_pipeline."""
    L, h, s, v, t, p, m, b = 12, 768, 1024, 50257, 2, 3, 6, 2
    a = ask(client, model="124m", dp=1, tp=t, pp=p, zero=0, batch_size=b * m,
            micro_batches=m, efficiency=0.4)
    flops, link = H100["peak_flops"] * 0.4, LinkFit(H100["alpha_s"], H100["nvlink_busbw_Bps"])
    fb, opt, inside = [], [], []
    for r in range(p):
        f = cost.rank_flops_per_token(L, h, s, v, t=t, p=p, rank=r, tied=True)
        fb.append({"gemm": f["gemm"] * b * m * s / flops,
                   "attention": f["attention"] * b * m * s / flops,
                   "op_overhead": 0.0, "memory_traffic": 0.0})
        state = memory.model_state("bf16_adamw", cost.rank_params(
            L, h, s, v, t=t, p=p, rank=r, tied=True))
        opt.append({"gemm": 0.0, "attention": 0.0, "op_overhead": 0.0,
                    "memory_traffic": 2 * state["total"] / H100["hbm_Bps"]})
        tp = cost.tp_comm(len(cost.stage_layers(L, p, r)), b, s, h, 2)["all_reduce"]
        inside.append({"TP all_reduce": m * tp["count"] * link.time(
            "all_reduce", tp["bytes"] / tp["count"], t)})
    t_p2p = link.time("send_recv", b * s * h * 2, 2)
    want = cost.predict_pipeline(fb, opt, m, t_p2p, inside)
    got = a["time"]
    assert got["step_time_s"] == pytest.approx(want["step_time_s"])
    assert got["terms_s"]["bubble"] == pytest.approx(want["terms_s"]["bubble"])
    assert got["terms_s"]["PP send/recv"] == pytest.approx(want["terms_s"]["comm"])
    assert got["critical_rank"] == want["critical_rank"]
    model_flops = cost.flops_per_token("gpt", L, h, s, v, True) * b * m * s
    assert a["mfu"] == pytest.approx(model_flops / (got["step_time_s"] * t * p
                                                    * H100["peak_flops"]))


def test_predict_pipeline_without_inside_terms_is_unchanged():
    fb = [{"gemm": 2.0, "attention": 0.5, "op_overhead": 0.1, "memory_traffic": 0.0}] * 4
    opt = [{"gemm": 0.0, "attention": 0.0, "op_overhead": 0.0, "memory_traffic": 0.2}] * 4
    old = cost.predict_pipeline(fb, opt, 8, 0.01)
    assert old == cost.predict_pipeline(fb, opt, 8, 0.01, [{}] * 4)
    # equal stages: m + p - 1 slots of (t_f + t_b)/m, plus the receives each stage waits
    # for (one on the end stages, two in the middle: 6 in the fill, 2 a later slot)
    assert old["step_time_s"] == pytest.approx((8 + 3) * 2.6 / 8 + (6 + 7 * 2) * 0.01 + 0.2)


# -- the published reference points -------------------------------------------------------


@pytest.mark.parametrize("zero,dp,per_param", [
    (0, 1, 16.0),  # 2 bf16 params + 2 bf16 grads + 12 fp32 master, m, v
    (0, 8, 16.0),  # plain DP replicates it all
    (1, 8, 4 + 12 / 8),  # ZeRO paper: optimizer state sharded
    (2, 8, 2 + 14 / 8),  # ... and the gradients
    (3, 8, 2.0),  # ... and the parameters: 16 / 8
])
def test_bytes_per_parameter_of_7b_with_mixed_precision_adam(client, zero, dp, per_param):
    a = ask(client, model="7b", zero=zero, dp=dp, batch_size=8 * dp, micro_batches=8)
    assert a["memory"]["bytes_per_param"] == pytest.approx(per_param)
    assert a["model"]["params"] == cost.param_count("gpt", 32, 4096, 4096, 32000)


@pytest.mark.parametrize("p,m", [(2, 1), (4, 4), (4, 16), (8, 32)])
def test_pipeline_bubble_is_p_minus_1_over_m_plus_p_minus_1(client, p, m):
    a = ask(client, model="7b", dp=1, pp=p, zero=0, micro_batches=m, batch_size=m)
    assert a["bubble_fraction"] == pytest.approx((p - 1) / (m + p - 1))


def test_tensor_parallel_all_reduces_four_times_b_s_h_per_layer(client):
    L, s, h, b, m = 32, 4096, 4096, 2, 4
    a = ask(client, model="7b", dp=1, tp=8, zero=0, batch_size=b * m, micro_batches=m)
    tp = a["communication"]["TP all_reduce"]
    assert tp["count"] == 4 * L * m
    assert tp["bytes"] == 4 * L * m * b * s * h * 2
    assert tp["ranks"] == 8 and tp["link"] == "in a node"


def test_data_parallel_and_zero_move_what_the_zero_paper_says(client):
    common = {"model": "1b", "dp": 8, "batch_size": 64, "micro_batches": 1}
    P, e = cost.param_count("gpt", 18, 2048, 2048, 50257, tied=True), 2
    dp = ask(client, zero=0, **common)["communication"]
    assert dp["DP all_reduce"]["bytes"] == P * e  # once per step, whatever m
    for stage in (1, 2):  # reduce-scatter + all-gather: DP's bytes, padded to d
        z = ask(client, zero=stage, **common)["communication"]
        for kind in ("DP reduce_scatter", "DP all_gather"):
            assert P * e <= z[kind]["bytes"] < P * e * 1.001
    z3 = ask(client, zero=3, **common)["communication"]
    moved = z3["DP all_gather"]["bytes"] + z3["DP reduce_scatter"]["bytes"]
    assert 2.8 * P * e < moved <= 3 * P * e * 1.001  # 3 P e (the root is gathered once)


def test_pipeline_sends_an_activation_forward_and_a_gradient_back(client):
    b, s, h, m = 2, 1024, 768, 4
    a = ask(client, model="124m", dp=1, pp=2, zero=0, batch_size=b * m, micro_batches=m)
    assert a["communication"]["PP send"] == {**a["communication"]["PP send"],
                                             "bytes": m * b * s * h * 2, "count": m}


# -- bad input ----------------------------------------------------------------------------


@pytest.mark.parametrize("payload,field", [
    ({"tp": "x"}, "tp"), ({"tp": True}, "tp"), ({"tp": 1.5}, "tp"), ({"tp": 0}, "tp"),
    ({"tp": [2]}, "tp"), ({"tp": 3}, "tp"), ({"pp": 33}, "pp"),
    ({"dp": 4096, "tp": 8, "batch_size": 4096 * 16}, "dp"), ({"batch_size": 100}, "batch_size"),
    ({"batch_size": -1}, "batch_size"), ({"micro_batches": 10**9}, "micro_batches"),
    ({"model": "13b"}, "model"), ({"model": 7}, "model"), ({"gpu": "h300"}, "gpu"),
    ({"gpu": "run:999"}, "gpu"), ({"gpu": "run:abc"}, "gpu"), ({"precision": "fp8"}, "precision"),
    ({"zero": 4}, "zero"), ({"zero": 3, "pp": 2, "dp": 1, "batch_size": 16}, "zero"),
    ({"efficiency": 2}, "efficiency"), ({"efficiency": "nan"}, "efficiency"),
    ({"overlap": "maybe"}, "overlap"), ({"memory_gb": -1}, "memory_gb"),
    ({"bogus": 1}, "bogus"), ({"model": "custom", "hidden": 100, "heads": 3}, "heads"),
    ({"model": "custom", "layers": 0}, "layers"),
    ({"recompute": "some"}, "recompute"), ({"activations": "guess"}, "activations"),
    ({"sequence_parallel": "perhaps"}, "sequence_parallel"),
    ({"virtual_stages": 0}, "virtual_stages"), ({"virtual_stages": 2}, "virtual_stages"),
    ({"model": "124m", "pp": 4, "virtual_stages": 2, "dp": 1, "batch_size": 16,
      "micro_batches": 16}, "virtual_stages"),  # 12 layers do not make 4 x 2 chunks
    ({"model": "124m", "pp": 2, "virtual_stages": 2, "dp": 1, "batch_size": 15,
      "micro_batches": 3}, "virtual_stages"),  # 3 micro-batches are not a multiple of 2
])
def test_bad_inputs_are_refused_naming_the_field(client, payload, field):
    for response in (client.post("/api/v1/calculator", json=payload),
                     client.get("/api/v1/calculator", query_string={
                         k: json.dumps(v) if isinstance(v, (bool, list)) else str(v)
                         for k, v in payload.items()})):
        assert response.status_code == 422, response.text
        error = response.json["error"]
        assert error["field"] == field and error["message"].startswith(field)


@pytest.mark.parametrize("data,content_type,status", [
    ("not json", "application/json", 422), ("[1, 2]", "application/json", 422),
    ("tp=2", "application/x-www-form-urlencoded", 422),
    (json.dumps({"model": "7b", "pad": "x" * 20_000}), "application/json", 413),
])
def test_a_malformed_or_oversized_body_is_a_4xx(client, data, content_type, status):
    response = client.post("/api/v1/calculator", data=data, content_type=content_type)
    assert response.status_code == status, response.text
    assert response.json["error"]["message"]


def test_viewers_may_ask_with_get_but_not_post(served):
    viewer = served.as_user(VIEWER)
    assert viewer("get", "/api/v1/calculator?model=124m&dp=2&batch_size=32").status_code == 200
    assert viewer("get", "/calculator").status_code == 200
    assert viewer("post", "/api/v1/calculator", json={}).status_code == 403
    assert served.as_user(OWNER)("post", "/api/v1/calculator", json={}).status_code == 200


# -- the page, without JavaScript ---------------------------------------------------------


def test_the_page_renders_the_default_answer(client):
    response = client.get("/calculator")
    assert response.status_code == 200
    assert_strict_page(response)
    a = ask(client)
    html = response.text
    assert 'aria-current="page">Calculator</a>' in html
    assert "6.72B" in html  # parameters of the default 7B preset
    assert f"{a['mfu'] * 100:.1f}%" in html
    form = parse(html)
    assert form.forms[-1]["method"] == "get" and form.forms[-1]["action"] == "/calculator"
    assert {"model", "tp", "pp", "dp", "zero", "micro_batches", "gpu"} <= set(form.inputs) | set(
        form.selects)
    assert "h100" in form.selects["gpu"]


def test_the_form_recalculates_through_the_server(client):
    html = client.get("/calculator", query_string={
        "model": "70b", "dp": "4", "tp": "8", "pp": "4", "zero": "1", "batch_size": "64",
        "micro_batches": "16", "overlap": "false"}).text
    a = ask(client, model="70b", dp=4, tp=8, pp=4, zero=1, batch_size=64, micro_batches=16,
            overlap=False)
    assert "64.99B" in html and f"{a['bubble_fraction'] * 100:.1f}%" in html
    assert 'data-comm-row="TP all_reduce">' in html  # shown (no hidden attribute)
    overlap = html.split('id="c-overlap"', 1)[1].split("</select>", 1)[0]
    assert '<option value="false" selected>' in overlap and " selected" not in overlap.replace(
        '<option value="false" selected>', "")


def test_the_form_sends_one_value_per_parameter_in_plain_words(client):
    html = client.get("/calculator").text
    form = parse(html)
    calc = html.split('id="calc-form"', 1)[1].split("</form>", 1)[0]
    named = re.findall(r'<(?:input|select)[^>]* name="([^"]+)"', calc)
    assert len(named) == len(set(named)), named  # a query of it repeats no parameter
    assert set(named) == set(whatif.FIELDS)
    assert {"tied", "overlap", "sequence_parallel", "recompute", "activations"} <= set(
        form.selects)
    for cryptic in ("(0: the GPU's)", "Fraction of peak", ">Hidden<"):
        assert cryptic not in html
    assert "Memory per GPU in GB (leave 0 for the GPU&#39;s own)" in html


def test_a_bad_value_on_the_page_is_said_and_kept(client):
    response = client.get("/calculator?model=7b&tp=5")
    assert response.status_code == 422
    assert_strict_page(response)
    assert "tp: the tensor-parallel degree must divide heads=32" in response.text
    assert 'name="tp" value="5"' in response.text
    tp = [i for i in parse(response.text).inputs["tp"] if i.get("type") == "number"][0]
    assert tp.get("aria-invalid") == "true"


# Korthikanti et al. 2022, Table 2: activation bytes per transformer layer, as multiples of
# s*b*h, for GPT-3 175B's shape (a = 96, s = 2048, h = 12288) on t = 8.
GPT3 = {"model": "custom", "layers": 96, "hidden": 12288, "heads": 96, "seq_len": 2048,
        "vocab": 51200, "tied": True, "tp": 8, "dp": 1, "pp": 1, "batch_size": 1,
        "micro_batches": 1, "activations": "paper"}
KORTHIKANTI = [  # (sequence_parallel, recompute, s*b*h multiple)
    (False, "none", 10 + 24 / 8 + 5 * 96 * 2048 / (12288 * 8)),
    (True, "none", 34 / 8 + 5 * 96 * 2048 / (12288 * 8)),
    (False, "selective", 10 + 24 / 8), (True, "selective", 34 / 8), (False, "full", 2),
]


@pytest.mark.parametrize("sp,recompute,multiple", KORTHIKANTI)
def test_the_papers_activation_table_comes_out_when_chosen(client, sp, recompute, multiple):
    a = ask(client, **GPT3, sequence_parallel=sp, recompute=recompute)
    base = ask(client, **{**GPT3, "layers": 1}, sequence_parallel=sp, recompute=recompute)
    # 95 more layers: the per-layer bytes, without the embedding's and the head's
    per_layer = (a["memory"]["parts_bytes"]["activations"]
                 - base["memory"]["parts_bytes"]["activations"]) / 95
    assert per_layer == pytest.approx(multiple * 2048 * 12288)
    assert any("Korthikanti" in line for line in a["assumptions"])


def test_sequence_parallelism_with_selective_recomputation_cuts_activations_5x(client):
    """The paper's headline: 5x less activation memory than tensor parallelism alone."""
    def per_layer(**kw):
        two = ask(client, **{**GPT3, "layers": 2}, **kw)["memory"]["parts_bytes"]["activations"]
        return two - ask(client, **{**GPT3, "layers": 1}, **kw)["memory"]["parts_bytes"][
            "activations"]
    ratio = per_layer() / per_layer(sequence_parallel=True, recompute="selective")
    assert 5 <= ratio < 6
    lab = ask(client, **{**GPT3, "activations": "lab"})  # fused attention, no dropout
    paper = ask(client, **GPT3)
    assert lab["memory"]["parts_bytes"]["activations"] < paper["memory"]["parts_bytes"][
        "activations"]


def test_recomputation_and_interleaving_trade_time_for_memory(client):
    plain = {"model": "1b", "dp": 1, "pp": 2, "batch_size": 16, "micro_batches": 8}
    a = ask(client, **plain)
    full = ask(client, **plain, recompute="full")
    assert full["memory"]["parts_bytes"]["activations"] < a["memory"]["parts_bytes"][
        "activations"]
    assert full["time"]["terms_s"]["gemm"] == pytest.approx(4 / 3 * a["time"]["terms_s"]["gemm"])
    inter = ask(client, **plain, virtual_stages=3)
    assert inter["bubble_fraction"] == pytest.approx(1 / (3 * 8 + 1))
    assert inter["time"]["terms_s"]["bubble"] == pytest.approx(a["time"]["terms_s"]["bubble"] / 3)
    assert inter["communication"]["PP send"]["count"] == 3 * a["communication"]["PP send"]["count"]
    assert inter["memory"]["parts_bytes"]["activations"] > a["memory"]["parts_bytes"][
        "activations"]  # stage 0 holds its warm-up's chunks
