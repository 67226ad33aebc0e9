"""When a strategy has been timed enough, and what its times may be trusted to say.

A step time is a median over timed steps, with its spread. At least MIN_STEPS are timed;
then more, round-robin with the other strategies, until the interquartile range is within
SPREAD_TARGET of the median, or the timing has run TIME_CAP_S, or STEP_CAP_FACTOR times
the steps asked. A step outside Tukey's fences (1.5 IQR beyond the quartiles, and never
within OUTLIER_FLOOR of the median) is marked an outlier: it stays in the record, and the
median, not it, makes the bar.

The measured numbers are also checked against each other: an MFU above 100%, or a step
faster than its own GEMMs as the calibration priced them, means a probe was slowed (the
machine is shared) - the figure is marked invalid and says why, instead of being
published. Plain arithmetic on recorded samples: tests feed it numbers, not clocks.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

MIN_STEPS = 5  # fewer (asked for explicitly: quick checks) are kept, but never "settled"
SPREAD_TARGET = 0.10  # IQR / median
TIME_CAP_S = 30.0  # of timing in all (warm-up included), all strategies together
STEP_CAP_FACTOR = 4
OUTLIER_FLOOR = 0.05  # of the median: a step this close is jitter, not an outlier


def quantile(values: list[float], q: float) -> float:
    s = sorted(values)
    k = (len(s) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def spread(times: list[float]) -> dict[str, Any]:
    """Median, quartiles, p10/p90, the IQR as a fraction of the median, and which steps
    (indices into `times`) are outliers."""
    if not times:
        return {"n": 0, "median": None, "outliers": [], "iqr_fraction": None}
    med = statistics.median(times)
    q1, q3 = quantile(times, 0.25), quantile(times, 0.75)
    reach = max(1.5 * (q3 - q1), OUTLIER_FLOOR * med)
    low, high = min(q1, med) - reach, max(q3, med) + reach
    return {"n": len(times), "median": med, "q1": q1, "q3": q3,
            "p10": quantile(times, 0.1), "p90": quantile(times, 0.9),
            "iqr_fraction": (q3 - q1) / med if med > 0 else None,
            "outliers": [i for i, t in enumerate(times) if t < low or t > high]}


def settled(times: list[float]) -> bool:
    s = spread(times)
    return s["n"] >= MIN_STEPS and s["iqr_fraction"] is not None \
        and s["iqr_fraction"] <= SPREAD_TARGET


def verdict(times: list[float], asked: int, elapsed_s: float) -> str | None:
    """None while more steps are wanted; otherwise why timing stopped."""
    if asked < MIN_STEPS and len(times) >= asked:
        return f"fewer than {MIN_STEPS} steps asked"
    if len(times) < asked:
        return None
    if settled(times):
        return "settled"
    if len(times) >= STEP_CAP_FACTOR * asked:
        return "step cap"
    if elapsed_s >= TIME_CAP_S:
        return "time cap"
    return None


def most_steps(asked: int) -> int:
    """The most timed steps `verdict` lets a strategy take when `asked` were asked."""
    return asked if asked < MIN_STEPS else STEP_CAP_FACTOR * asked


class StepCount:
    """What a training run's progress lines count: the steps done (each strategy's gate,
    warm-up and timed steps) of the most it may still take. That total is the largest at
    the start and shrinks as a strategy fails its gate or stops short of the step cap, so
    a page or a terminal never shows a denominator that later grows."""

    def __init__(self, say: Callable[..., None], strategies: int, warmup: int,
                 asked: int) -> None:
        self.say = say  # Context.progress: (step, total, **fields)
        self.each = 1 + warmup + most_steps(asked)
        self.done, self.total = 0, strategies * self.each

    def __call__(self, counted: bool = True, **fields: Any) -> None:
        """A step done (counted), or what starts now before the next one is."""
        self.done += counted
        self.say(self.done, self.total, **fields)

    def ended(self, rounds: int) -> None:
        """A strategy took its last step: its gate, then `rounds` rounds of timing (warm-up
        included; none when it failed its gate)."""
        self.total -= self.each - 1 - rounds


def validity(mfu: float | None, step_s: float, gemm_floor_s: float,
             peak_samples: list[float]) -> list[str]:
    """What makes this strategy's efficiency figures untrustworthy, in words (none: fine).
    gemm_floor_s: the longest any rank's own GEMMs take, as the calibration priced them."""
    problems = []
    if peak_samples:
        lo, hi = min(peak_samples), max(peak_samples)
        probe = (f"the peak probe measured {lo / 1e9:.3g}-{hi / 1e9:.3g} GFLOP/s over "
                 f"{len(peak_samples)} tries")
    else:
        probe = "the peak was probed once"
    if mfu is not None and mfu > 1.0:
        problems.append(f"MFU {mfu:.0%} is above 100%, which no step can reach: the peak "
                        f"it is measured against was probed while the machine was busier "
                        f"than during the step ({probe})")
    if gemm_floor_s > 0 and step_s < gemm_floor_s:
        problems.append(f"the step ({step_s * 1e3:.3g} ms) was faster than its own GEMMs "
                        f"as priced ({gemm_floor_s * 1e3:.3g} ms): the GEMM probes ran "
                        f"slower than the step's, so the prediction is too high")
    return problems
