"""A training run's progress total: the most steps the run may still take, shown from the
first line and only ever shrinking as strategies fail their gate or settle - never a
denominator that later grows (25/28, then 32/32). The real timing loop on a one-rank gloo
group, its strategies' steps scripted times."""

from __future__ import annotations

from jobs.lab.experiments import timing, training
from jobs.lab.experiments.probes import OverheadProbe
from jobs.lab.predict.calibration import Calibration

NOISY = [0.010, 0.014, 0.020, 0.011, 0.018]  # never settles: timed to the step cap


def test_the_first_total_is_the_largest_and_the_last_is_the_steps_taken(one_rank):
    lines: list[tuple[int, int]] = []
    progress = timing.StepCount(lambda step, total, **_: lines.append((step, total)),
                                strategies=3, warmup=1, asked=5)
    steady, noisy = {"name": "steady", "times": []}, {"name": "noisy", "times": []}
    for _ in range(3):  # the gates; the third strategy fails its own
        progress(counted=False, phase="gate")
        progress()
    progress.ended(0)

    def step(st: dict, i: int) -> None:
        if i >= 1:  # past the warm-up
            k = len(st["times"])
            st["times"].append(0.010 if st is steady else NOISY[k % len(NOISY)])
        progress(phase="timed")

    training.timing_rounds(one_rank, [steady, noisy], Calibration(flops=1.0, peak_flops=1.0),
                           OverheadProbe(lambda: None, 0.0, 1), 1, 5, "float32", step,
                           progress.ended)
    assert (steady["stopped"], noisy["stopped"]) == ("settled", "step cap")
    assert len(noisy["times"]) == timing.most_steps(5) == 4 * 5
    totals = [total for _, total in lines]
    assert totals[0] == 3 * (1 + 1 + 20)
    assert totals == sorted(totals, reverse=True) and totals[-1] < totals[0]
    assert all(step <= total for step, total in lines)
    # every step counted once, and the last line's total is the steps taken
    assert [s for s, _ in lines[1::2][:3]] == [1, 2, 3]
    assert lines[-1] == (3 + 6 + 21, 3 + 6 + 21)


def test_a_quick_check_is_never_extended_so_its_total_is_exact():
    assert timing.most_steps(3) == 3
    assert timing.most_steps(timing.MIN_STEPS) == timing.STEP_CAP_FACTOR * timing.MIN_STEPS
