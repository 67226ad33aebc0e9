"""What a finished run teaches in words (app/journal/views/lessons.py, advice.py), on real
lab runs (tests/real_runs.py) and on their results with a number changed: one verdict on
what dominated, advice that follows it and is the strategy's own, every sentence computed
from the result's own numbers."""

from __future__ import annotations

import copy
import json

import pytest

from app.journal import numbers
from app.journal.views import advice, card_training, hardware_lessons, lessons
from tests.real_runs import lab_output


def result_of(tmp_path_factory, experiment: str) -> dict:
    return json.loads((lab_output(tmp_path_factory, experiment) / "result.json").read_text())


def test_the_zero_lesson_quotes_the_model_state_it_saved(tmp_path_factory):
    result = result_of(tmp_path_factory, "zero")
    totals = {s["strategy"]: s["memory"][0]["measured"]["total"] for s in result["strategies"]}
    small, big = min(totals, key=totals.get), max(totals, key=totals.get)
    text = " ".join(lessons.training(result))
    assert f"{small} holds {numbers.si(totals[small], 'B')}" in text
    assert f"{big}'s {numbers.si(totals[big], 'B')}" in text


def test_the_pipeline_lesson_weighs_micro_batch_overhead_against_the_bubble(tmp_path_factory):
    """Told as the owner saw it: GPipe slower than naive model parallel. The step times are
    set so (whatever this machine measured); the terms are the run's own."""
    result = copy.deepcopy(result_of(tmp_path_factory, "pipeline"))
    result["calibration"]["concurrency"]["slowdown_all_at_once"] = 1.0  # a core per rank
    by_name = {s["strategy"]: s for s in result["strategies"]}
    naive, gpipe = by_name["naive_mp"], by_name["gpipe"]
    for s in result["strategies"]:
        s["step_time_s"]["median"] = 0.05
    naive["step_time_s"]["median"], gpipe["step_time_s"]["median"] = 0.01, 0.09
    m = result["params"]["micro_batches"]
    extra = gpipe["prediction"]["terms_s"]["op_overhead"] - \
        naive["prediction"]["terms_s"]["op_overhead"]
    sentence = lessons.training(result)[0]
    assert sentence.startswith("gpipe is slower than naive model parallel here (90 ms vs 10 ms")
    assert f"into {m} micro-batches adds {numbers.seconds(extra)}" in sentence
    assert f"{numbers.seconds(extra / m)} per micro-batch × {m}" in sentence


def test_one_verdict_decides_what_dominated_and_the_advice_follows_it(tmp_path_factory):
    """As the owner saw it on the ZeRO card: an unmodelled cost "dominated", then
    "Communication dominates: overlap it (bucketed DDP)". The step times are set so."""
    result = copy.deepcopy(result_of(tmp_path_factory, "zero"))
    for s in result["strategies"]:
        s["step_time_s"]["median"] = s["prediction"]["step_time_s"]
    slow = result["strategies"][-1]
    slow["step_time_s"]["median"] = 10 * slow["prediction"]["step_time_s"]
    slow["prediction"]["off"] = {"term": "communication", "why": "communication: 9 ms "
                                 "measured against 1 ms predicted"}
    told = lessons.training(result)
    assert any(f"{slow['strategy']} took" in t and "off on communication: 9 ms" in t
               for t in told), told
    assert told[-1].startswith(f"To see where {slow['strategy']}'s unexplained")
    assert not any("dominates" in t for t in told), told


@pytest.mark.parametrize("name,words", [
    ("dp_naive", "one all-reduce per gradient (12 calls): bucket them"),
    ("ddp", "batch_size 8 → 32 makes compute the larger share"),
    ("zero3", "1.5× data parallel's bytes"),
    ("tp_megatron", "on the critical path of every layer (12 calls a step)"),
    ("1f1b", "larger micro-batches")])
def test_communication_advice_is_the_strategys_own(name, words):
    comm = {"per_rank": [{"per_step": {"all_reduce": {"count": 12, "bytes": 1}}}]}
    text = advice.communication(name, comm, 0.00785, 8)
    assert text.startswith(f"Communication (7.85 ms a step) dominates {name}")
    assert words in text
    assert advice.communication(name, "hostile", 0.001, None)  # whatever a runner sent


def test_communication_priced_far_above_what_was_measured_is_not_said_to_dominate():
    # zero3 in a default ZeRO run: "off on communication: 0.375 ms measured against 29.9 ms
    # predicted", then "Communication (28.7 ms a step) dominates zero3"
    off = {"term": "communication", "measured_s": 0.000375, "predicted_s": 0.0299}
    text = advice.communication("zero3", {}, 0.0287, 8, off)
    assert text.startswith("Communication did not dominate zero3 as measured: 375 µs a step "
                           "against the 28.7 ms it was priced at")
    assert "dominates" not in text
    near = {**off, "measured_s": 0.025}  # measured close to its price: it did dominate
    assert advice.communication("zero3", {}, 0.0287, 8, near).startswith(
        "Communication (28.7 ms a step) dominates zero3")
    compute = {**off, "term": "compute"}
    assert "dominates zero3" in advice.communication("zero3", {}, 0.0287, 8, compute)


def test_on_shared_cores_the_pipeline_lesson_says_the_host_cannot_show_it(tmp_path_factory):
    result = copy.deepcopy(result_of(tmp_path_factory, "pipeline"))
    result["calibration"]["concurrency"]["slowdown_all_at_once"] = 3.7  # 8 users, 2 cores
    by_name = {s["strategy"]: s for s in result["strategies"]}
    by_name["naive_mp"]["step_time_s"]["median"] = 0.43
    by_name["gpipe"]["step_time_s"]["median"] = 0.56
    sentence = lessons.training(result)[0]
    assert sentence.startswith("gpipe is slower than naive model parallel here (560 ms vs "
                               "430 ms a step) because this host cannot run the stages")
    assert "slowed each rank 3.7×" in sentence and "−" not in sentence


def test_a_pipeline_slower_than_the_saving_it_was_priced_says_its_stages_did_not_overlap(
        tmp_path_factory):
    """As measured on this box (eight users, two cores): naive 426 ms, GPipe 486 ms, the
    model pricing a net saving. Times and bubble terms set so; the rest is the run's own."""
    result = copy.deepcopy(result_of(tmp_path_factory, "pipeline"))
    result["calibration"]["concurrency"]["slowdown_all_at_once"] = 1.0
    by_name = {s["strategy"]: s for s in result["strategies"]}
    naive, gpipe = by_name["naive_mp"], by_name["gpipe"]
    naive["step_time_s"]["median"], gpipe["step_time_s"]["median"] = 0.426, 0.486
    for s in result["strategies"]:
        s["prediction"]["terms_s"]["op_overhead"] = 0.010
    naive["prediction"]["terms_s"]["bubble"], gpipe["prediction"]["terms_s"]["bubble"] = \
        0.200, 0.034
    # the net is the model's whole: the bubble saved less what every other term grew by
    grew = sum(v - naive["prediction"]["terms_s"].get(k, 0)
               for k, v in gpipe["prediction"]["terms_s"].items() if k != "bubble")
    assert grew < 0.166
    sentence = lessons.training(result)[0]
    assert sentence == ("gpipe is slower than naive model parallel here (486 ms vs 426 ms a "
                        "step), although the cost model expected micro-batches to save "
                        f"{numbers.seconds(0.166 - max(grew, 0))} net (166 ms of bubble): its "
                        "stages did not run side by side as the formula assumes, as when other "
                        "work shares the cores.")


def test_a_pipeline_the_model_priced_slower_is_not_said_to_have_been_priced_a_saving():
    """As a learner saw the first pipeline run: 1F1B 400 ms against naive 205 ms, and the
    card said the model "expected micro-batches to save 33.4 ms net" while it priced 1F1B
    at 349 ms against naive's 243 ms: the micro-batches' smaller matrix multiplies cost the
    model more than the bubble they saved. The terms are that run's."""
    naive = {"gemm": 0.1065, "attention": 0.0070, "op_overhead": 0.0027, "comm": 0.0038,
             "memory_traffic": 0.0024, "bubble": 0.1205}
    one_f_one_b = {"gemm": 0.2250, "attention": 0.0164, "op_overhead": 0.0215, "comm": 0.0098,
                   "memory_traffic": 0.0082, "bubble": 0.0682}
    result = {"params": {"world_size": 2, "micro_batches": 4, "batch_size": 16},
              "calibration": {"concurrency": {"slowdown_all_at_once": 1.02}},
              "strategies": [{"strategy": name, "correctness": {"passed": True},
                              "step_time_s": {"median": step},
                              "prediction": {"step_time_s": sum(terms.values()),
                                             "terms_s": terms}}
                             for name, step, terms in (("naive_mp", 0.205, naive),
                                                       ("1f1b", 0.400, one_f_one_b))]}
    sentence = lessons.training(result)[0]
    assert "expected micro-batches to save" not in sentence
    assert sentence == ("1f1b is slower than naive model parallel here (400 ms vs 205 ms a "
                        "step): splitting the batch into 4 micro-batches adds 18.8 ms of "
                        "per-operator overhead (4.7 ms per micro-batch × 4) and 119 ms of "
                        "matrix multiplies, 158 ms in all, more than the 52.3 ms of bubble it "
                        "saves; each micro-batch is too small to fill the device.")


def test_a_residual_the_lab_found_in_an_underpriced_term_is_named_as_that_term():
    """As a learner saw the first tensor-parallel run: the lab measured tp_megatron's
    communication at 13.1 ms against 5.23 ms priced, most of its 8.19 ms residual, yet the
    card said "what dominated is something the model lacks (Python between the
    operators…)". The numbers are that run's."""
    unmodelled = ["Python between the operators beyond the probe's average (hooks, the "
                  "step's code)"]
    result = {"params": {"world_size": 2, "hidden": 32, "batch_size": 4},
              "strategies": [
                  {"strategy": "single", "correctness": {"passed": True},
                   "step_time_s": {"median": 0.00251},
                   "prediction": {"step_time_s": 0.00162, "unmodelled": unmodelled,
                                  "terms_s": {"gemm": 0.00026, "op_overhead": 0.00100}}},
                  {"strategy": "tp_megatron", "correctness": {"passed": True},
                   "step_time_s": {"median": 0.016415},
                   "prediction": {"step_time_s": 0.008221, "unmodelled": unmodelled,
                                  "terms_s": {"gemm": 0.00038, "op_overhead": 0.00203,
                                              "comm": 0.005227},
                                  "off": {"term": "communication", "measured_s": 0.013066,
                                          "predicted_s": 0.005227,
                                          "why": "communication: 13.1 ms measured against "
                                                 "5.23 ms predicted"}}}]}
    told = lessons.training(result)
    assert not any("something the model lacks" in t or "the model lacks" in t
                   for t in told), told
    assert ("tp_megatron took 16.4 ms against 8.22 ms predicted (2.00×); off on "
            "communication: 13.1 ms measured against 5.23 ms predicted: those 7.84 ms beyond "
            "its price are most of the 8.19 ms the model leaves unexplained, so what dominated "
            "is communication, priced too low.") in told
    assert told[-1] == ("To see where tp_megatron's unexplained 8.19 ms went, open its "
                        "timeline: most of it is communication, measured at 13.1 ms against "
                        "the 5.23 ms it was priced at.")


def _pipeline_result(steps: dict[str, float], slowdown: float = 1.0,
                     gpipe_priced: float = 0.110) -> dict:
    """The default pipeline run as a learner saw it (naive_mp 40.9 ms, gpipe 133 ms),
    naive_mp explained worst and its bubble its largest term."""
    priced = {"naive_mp": (0.0758, {"gemm": 0.010, "op_overhead": 0.030, "bubble": 0.0311}),
              "gpipe": (gpipe_priced, {"gemm": 0.010, "op_overhead": 0.082, "bubble": 0.026})}
    return {"params": {"world_size": 2, "micro_batches": 4, "batch_size": 8, "hidden": 64},
            "calibration": {"concurrency": {"slowdown_all_at_once": slowdown}},
            "strategies": [{"strategy": name, "correctness": {"passed": True},
                            "step_time_s": {"median": step},
                            "prediction": {"step_time_s": priced[name][0],
                                           "terms_s": priced[name][1]}}
                           for name, step in steps.items()]}


def test_the_bubble_advice_never_contradicts_the_pipeline_story():
    told = lessons.training(_pipeline_result({"naive_mp": 0.0409, "gpipe": 0.133}))
    assert told[0].startswith("gpipe is slower than naive model parallel here")
    assert told[-1] == ("The bubble dominates naive_mp (31.1 ms), but in this run "
                        "micro-batching cost more than it saved, so more micro-batches would "
                        "not help: give each more work (batch_size 8 → 32, micro_batches "
                        "still 4) so that its compute outweighs its per-operator overhead.")
    shared = lessons.training(_pipeline_result({"naive_mp": 0.0409, "gpipe": 0.133}, 3.7))
    assert "cannot run the stages at once" in shared[0]
    assert "take turns on the cores, so no micro-batching can shrink it" in shared[-1]
    # naive model parallelism has no micro-batches: micro_batches does not move its bubble
    won = lessons.training(_pipeline_result({"naive_mp": 0.0409, "gpipe": 0.030},
                                            gpipe_priced=0.030))
    assert won[-1].startswith("naive_mp's bubble (31.1 ms) is (p−1)/p = 50% of its step "
                              "whatever micro_batches says")
    assert "from 20% at m=4 to 6% at m=16" in won[-1]
    # the one-device reference has no micro-batches either: slower than naive, it is no loss
    single = _pipeline_result({"naive_mp": 0.0409, "gpipe": 0.030}, gpipe_priced=0.030)
    single["strategies"].append({**single["strategies"][1], "strategy": "single",
                                 "step_time_s": {"median": 0.060},
                                 "prediction": {"step_time_s": 0.060,
                                                "terms_s": {"gemm": 0.050}}})
    told = lessons.training(single)
    assert not any("single is slower" in t for t in told), told
    assert told[-1].startswith("naive_mp's bubble (31.1 ms)"), told


def test_the_pipeline_card_shows_bubble_layers_and_activations_per_stage(tmp_path_factory):
    result = result_of(tmp_path_factory, "pipeline")
    html = card_training.pipeline(result["strategies"])
    gpipe = next(s for s in result["strategies"] if s["strategy"] == "gpipe")
    assert numbers.percent(gpipe["bubble"]["measured_idle_fraction"]) in html
    assert numbers.percent(gpipe["bubble"]["predicted"]) in html
    stage = gpipe["extra"][0]
    layers = stage["layers"]
    assert f"{layers[0]}–{layers[-1]} ({len(layers)})" in html
    held = gpipe["memory"][0]
    assert (f"{numbers.si(held['saved_activation_peak_bytes'], 'B')} / "
            f"{numbers.si(held['predicted_activation_bytes'], 'B')}") in html


def test_collective_and_roofline_lessons_quote_their_fits(tmp_path_factory):
    coll = result_of(tmp_path_factory, "collectives")
    fit = coll["fits"]["all_reduce"]
    text = " ".join(hardware_lessons.collectives(coll))
    assert f"α = {numbers.seconds(fit['alpha_s'])}" in text
    assert f"W = {numbers.si(fit['busbw_Bps'], 'B/s')}" in text
    roof = result_of(tmp_path_factory, "gemm_roofline")
    text = " ".join(hardware_lessons.roofline(roof))
    assert f"{roof['peak_flops'] / roof['copy_bandwidth_Bps']:.3g} FLOP/B" in text
    mfu = result_of(tmp_path_factory, "gpt_mfu")
    text = " ".join(hardware_lessons.mfu(mfu))
    assert numbers.percent(mfu["mfu"]) in text and mfu["peak_name"] in text


def test_a_collective_fit_that_misses_its_samples_is_not_quoted_as_the_links_bandwidth():
    """As a learner saw the first collectives run on a busy host: all_reduce's times did
    not grow with the size, the fit fell back to W a thousand times the largest sample's,
    and the card said "bus bandwidth W = 195 GB/s, so a message must reach about 65.5 MB"
    and to raise max_bytes past it. The numbers are that run's."""
    times = {1024: 0.002228, 2048: 0.000643, 4096: 0.000761, 8192: 0.00256,
             16384: 0.000634, 32768: 0.000353, 65536: 0.000336}
    coll = {"params": {"iters": 3, "max_bytes": 65536},
            "factors": {"all_reduce": 1.0, "all_gather": 0.5},
            "fits": {"all_reduce": {"alpha_s": 0.000336, "busbw_Bps": 1.953e11,
                                    "rms_rel_error": 0.566},
                     "all_gather": {"alpha_s": 0.000257, "busbw_Bps": 4.80e8,
                                    "rms_rel_error": 0.114}},
            "table": [{"op": "all_reduce", "bytes": b, "time_s": t, "busbw_Bps": b / t}
                      for b, t in times.items()]}
    told = hardware_lessons.collectives(coll)
    text = " ".join(told)
    assert "bus bandwidth W" not in text and "65.5 MB" not in text, told
    assert told == [
        "all_reduce: the α–β fit (α = 336 µs, W = 195 GB/s) misses its samples by 57% (rms), "
        "so neither number is this link's; the best measured was 195 MB/s (65.5 kB in "
        "336 µs).",
        "To measure the link, run it again on an idle machine or with more iters (now 3): "
        "every other prediction is built on these numbers."]


def test_a_collective_fit_that_says_it_fell_back_is_not_quoted_whatever_its_error():
    """The lab's fit says when it fell back to a guess: the card says so and why, even
    where the guess happens to miss its samples by less than ROUGH."""
    coll = {"params": {"iters": 3},
            "fits": {"all_reduce": {"alpha_s": 0.000336, "busbw_Bps": 1.953e11,
                                    "rms_rel_error": 0.2,
                                    "fallback": "the times did not grow with the size"},
                     "all_gather": {"alpha_s": 0.000257, "busbw_Bps": 4.80e8,
                                    "rms_rel_error": 0.114}},
            "table": [{"op": "all_reduce", "bytes": 65536, "time_s": 0.000336,
                       "busbw_Bps": 65536 / 0.000336}]}
    told = hardware_lessons.collectives(coll)
    assert told[0] == ("all_reduce: no α–β line fits the samples (the times did not grow "
                       "with the size), so the fit's α = 336 µs and W = 195 GB/s are a "
                       "guess, not this link's; the best measured was 195 MB/s (65.5 kB in "
                       "336 µs)."), told
    # another op's guess is named beside a fitted one
    coll["fits"]["all_reduce"].update(fallback=None, rms_rel_error=0.01)
    coll["fits"]["all_gather"]["fallback"] = "the best line's latency was below zero"
    told = hardware_lessons.collectives(coll)
    assert told[0].startswith("all_reduce: latency α = 336 µs and bus bandwidth W"), told
    assert ("No α–β line fits all_gather's samples (the best line's latency was below "
            "zero): its α and W are a guess, so read the points, not the fit.") in told


def test_a_wrapper_whose_own_python_dominated_is_told_to_give_each_operator_more_work(
        tmp_path_factory):
    """FSDP2's hooks (the hook probe's term) outweigh everything else in the slowest step;
    times and terms set so, the rest is the run's own."""
    result = copy.deepcopy(result_of(tmp_path_factory, "zero"))
    for s in result["strategies"]:
        s["step_time_s"]["median"] = s["prediction"]["step_time_s"] = 0.010
        s["prediction"]["terms_s"] = {"gemm": 0.005, "comm": 0.005}
    fsdp2 = next(s for s in result["strategies"] if s["strategy"] == "fsdp2")
    fsdp2["step_time_s"]["median"] = fsdp2["prediction"]["step_time_s"] = 0.050
    fsdp2["prediction"]["terms_s"] = {"gemm": 0.005, "hooks": 0.030, "comm": 0.015}
    said = " ".join(lessons.training(result))
    assert "the wrapper's own Python (its hooks) (30 ms)" in said
    assert "give each operator more work (hidden" in said
