"""The timing rule and the validity checks, on recorded samples (no clocks): enough steps,
more while the spread is wide, outliers marked rather than made the bar, and an MFU above
100% or a step faster than its own GEMMs called invalid."""

from __future__ import annotations

import pytest

from jobs.lab.experiments import probes, summary, timing
from jobs.lab.predict import calibration

# fsdp2 in a suggested first run: one preempted step among quick ones
PREEMPTED = [0.0195, 0.0190, 0.721, 0.0201, 0.0188]


def test_one_slow_step_is_an_outlier_and_not_the_median():
    s = timing.spread(PREEMPTED)
    assert s["median"] == 0.0195 and s["outliers"] == [2]
    assert s["n"] == 5 and s["q1"] == 0.0190 and s["q3"] == 0.0201
    # two steps, as before: their median was the mean, 370 ms
    assert timing.spread(PREEMPTED[1:3])["median"] == pytest.approx(0.37, abs=1e-3)


def test_steps_within_jitter_of_the_median_are_never_outliers():
    even = [0.0100, 0.0100, 0.0100, 0.0100, 0.0104]  # IQR 0: 1.5 IQR would flag 4%
    assert timing.spread(even)["outliers"] == []
    assert timing.spread([0.0100] * 4 + [0.0110])["outliers"] == [4]


def test_at_least_five_steps_then_more_until_the_spread_settles_or_a_cap():
    assert timing.verdict(PREEMPTED[:4], asked=5, elapsed_s=0.0) is None  # too few yet
    assert timing.verdict(PREEMPTED, asked=5, elapsed_s=0.0) == "settled"  # IQR 6%
    noisy = [0.010, 0.014, 0.020, 0.011, 0.018]  # IQR 70% of the median
    assert timing.verdict(noisy, asked=5, elapsed_s=1.0) is None  # keep timing
    assert timing.verdict(noisy, asked=5, elapsed_s=timing.TIME_CAP_S) == "time cap"
    capped = noisy * timing.STEP_CAP_FACTOR
    assert timing.verdict(capped, asked=5, elapsed_s=1.0) == "step cap"
    # a quick check that asked for fewer is not extended, and not called settled
    assert timing.verdict([0.01, 0.02], asked=2, elapsed_s=0.0) == "fewer than 5 steps asked"
    assert not timing.settled([0.01, 0.01])


def test_an_mfu_above_100_percent_is_invalid_and_says_why():
    # the 512^3 probe varied 17.8-99.8 GFLOP/s; against the low one MFU read 445%
    problems = timing.validity(4.45, 0.020, 0.004, [17.8e9, 99.8e9])
    assert len(problems) == 1
    assert problems[0].startswith("MFU 445% is above 100%")
    assert "17.8-99.8 GFLOP/s over 2 tries" in problems[0]
    assert timing.validity(0.42, 0.020, 0.004, [17.8e9, 99.8e9]) == []


def test_a_step_faster_than_its_own_priced_gemms_is_invalid():
    problems = timing.validity(0.3, 0.010, 0.016, [])
    assert len(problems) == 1 and "faster than its own GEMMs" in problems[0]
    assert "10 ms" in problems[0] and "16 ms" in problems[0]


def test_the_peak_is_the_best_of_its_tries_with_their_spread():
    cal = calibration.Calibration(flops=0.0, peak_flops=17.8e9, peak_samples=[17.8e9])
    cal.add_peak_samples([99.8e9, 60e9])
    assert cal.peak_flops == 99.8e9
    spread = cal.as_dict()["peak_spread"]
    assert spread == {"n": 3, "min": 17.8e9, "median": 60e9, "max": 99.8e9, "kept": "best"}


def test_a_measured_peak_is_the_best_of_tries_that_include_the_models_own_gemm_rate():
    # a data_parallel run on a busy host: the square probe's best try 17.3 GFLOP/s, the
    # model's GEMMs 75.3 - the peak was 75.3, named and spread as the square probe's
    peak, tries, name = probes.measured_peak(17.3e9, "measured 512^3 float32 GEMM", 75.3e9)
    assert peak == 75.3e9 and tries == [17.3e9, 75.3e9]
    assert name == "measured 512^3 float32 GEMM or the model's own GEMM, the faster"
    cal = calibration.Calibration(flops=75.3e9, peak_flops=peak, peak_samples=tries)
    cal.add_peak_samples([60e9, 80e9])
    assert cal.peak_flops == cal.as_dict()["peak_spread"]["max"] == 80e9
    assert probes.measured_peak(989e12, "H100 dense bf16 datasheet", 600e12) == (
        989e12, [], "H100 dense bf16 datasheet")


def test_outside_one_and_a_half_the_result_names_the_term_that_was_off():
    # tp_megatron in a bench run: 71 ms measured, 16.7 ms predicted, 57 ms in all-reduces
    pred = {"step_time_s": 0.0167, "terms_s": {"gemm": 0.0022, "op_overhead": 0.0078,
                                               "memory_traffic": 0.0004, "comm": 0.0054}}
    timed = {"instrumented": True,
             "per_rank": [{"per_step": {"all_reduce": {"time_s": 0.0573}}},
                          {"per_step": {"all_reduce": {"time_s": 0.0401}}}]}
    off = summary.off_term(0.0712, pred, timed)
    assert off["term"] == "communication"
    assert off["why"] == "communication: 57.3 ms measured against 5.4 ms predicted"
    assert summary.off_term(0.020, pred, timed) is None  # within 1.5x: nothing to name
    counted = {"instrumented": False, "per_rank": []}  # PyTorch's own: counted, not timed
    assert summary.off_term(0.0712, pred, counted)["term"] is None
    piped = {**pred, "terms_s": {**pred["terms_s"], "bubble": 0.004}}
    assert "cannot be told apart" in summary.off_term(0.0712, piped, timed)["why"]
    # with its compute spans: a pipeline's compute against the rest (sends, waits, bubble)
    spans = {"forward": (0.004, 0.003), "backward": (0.006, 0.005), "optimizer": (0.001, 0.001)}
    off = summary.off_term(0.0712, piped, timed, spans)
    assert off["term"] == "communication and bubble"
    assert off["measured_s"] == pytest.approx(0.0712 - 0.011)
    assert off["predicted_s"] == pytest.approx(0.0167 - 0.009)


def test_pytorchs_own_strategy_off_names_the_phase_that_missed_by_the_most():
    # fsdp2's collectives are counted, not timed: the phase spans say where the time went
    pred = {"step_time_s": 0.0196, "terms_s": {"gemm": 0.002, "op_overhead": 0.0076,
                                               "comm": 0.01}}
    counted = {"instrumented": False, "per_rank": []}
    phases = {"forward": (0.016, 0.0034), "backward": (0.0287, 0.0072),
              "optimizer": (0.0091, 0.0001)}
    off = summary.off_term(0.043, pred, counted, phases)
    assert off["term"] == "backward" and off["measured_s"] == 0.0287
    assert off["why"].startswith("backward: 28.7 ms measured against 7.2 ms of priced compute")


def test_a_phase_is_judged_against_what_the_prediction_added_to_it():
    # torch_zero_bubble: its backward's second autograd pass is priced beside the
    # census's compute, so the card's backward is held to both
    report = {"phases_per_step": {"forward": 0.010, "backward": 0.030, "schedule": 0.045},
              "compute": {"forward": {"gemm": 0.004, "op_overhead": 0.005},
                          "backward": {"gemm": 0.008, "op_overhead": 0.012}}}
    assert summary._phases(report) == {"forward": (0.010, pytest.approx(0.009)),
                                       "backward": (0.030, pytest.approx(0.020))}
    judged = summary._phases(report, {"backward": 0.012})
    assert judged["backward"] == (0.030, pytest.approx(0.032))
    assert judged["forward"] == (0.010, pytest.approx(0.009))
