"""What changed since the runs before: a run's headline numbers against the previous
successful run that measured the same thing, and against a rolling baseline (the median of
the BASELINE_RUNS before it), each change judged against the spread the runs measured.

Which runs measured the same thing: the same comparison key (the experiment and its
parameters less the sampling ones, run_metrics.comparison_key), whoever started them; a
schedule's runs share it while the schedule's parameters stay. A schedule whose
parameters were edited says so instead of comparing across the edit.

The headline numbers, read from the result as the lab writes it:

  step time     per strategy (the median, its p10–p90 measured over the timed steps)
  MFU           per strategy, and a single-device run's (its spread is its step time's)
  peak memory   per strategy, the largest rank's; a single-device run's
  busbw         per collective and message size (the median, its p10–p90 over iterations)
  peak FLOP/s, copy bandwidth   the roofline's (no spread is measured)
  an own experiment's scalars    each positive one reported, with the direction its
                declaration gives it (`better`); one without a direction is drawn but never
                judged a regression. Its spread is that of the per-step series its
                declaration ties it to (`spread`, e.g. a median step time's per-step
                times: their p10–p90 relative to their median), else none is measured

Noise: a number's spread is the half-width of its p10–p90 as a fraction of it. Two runs
differ beyond noise when the change is larger than both their spreads added (the bands
do not overlap), and never within MIN_NOISE. A number with no measured spread (memory, a
roofline peak) is judged against DEFAULT_NOISE, and its line says so. A change beyond
noise in the wrong direction (slower, less bandwidth, more memory, lower MFU) is a
regression.

Torch-free and write-free: functions take an open session and never commit.
"""

from __future__ import annotations

import datetime as dt
import statistics
from dataclasses import dataclass, field

import sqlalchemy as sa
from sqlalchemy.orm import Session

from app.journal.numbers import finite, seconds, si
from app.journal.run_metrics import HIGHER, LOWER, METRICS, NAME_RE, strategy_metrics
from app.models import Run
from base import statuses

DEFAULT_NOISE = 0.05  # assumed where a number has no measured spread
MIN_NOISE = 0.01  # runs on one machine are never trusted to agree closer than this
BASELINE_RUNS = 5
MAX_NUMBERS = 64  # headline numbers read from one result
OWN = "own"  # the metric of an own experiment's scalar
MIN_SERIES = 3  # per-step values needed to measure an own scalar's spread
LABELS = {"step_time_s": "step time", "mfu": "MFU", "peak_memory_bytes": "peak memory",
          "busbw_Bps": "busbw", "peak_flops": "peak FLOP/s",
          "copy_bandwidth_Bps": "copy bandwidth"}


@dataclass(frozen=True)
class Number:
    key: str  # "1f1b.step_time_s", "all_reduce.busbw_Bps@268435456"
    label: str  # "1f1b step time", "all_reduce at 268 MB"
    metric: str  # a key of run_metrics.METRICS: which way is better
    value: float
    low: float | None = None  # p10 (for a rate, the rate at the p90 time)
    high: float | None = None
    better: str = ""  # an own scalar's declared direction ("" for none)
    unit: str = ""  # an own scalar's declared unit

    @property
    def direction(self) -> str:
        """Which way is better: the lab's metric's, an own scalar's declared one, or ""."""
        return self.better if self.metric == OWN else METRICS.get(self.metric, "")

    @property
    def spread(self) -> float | None:
        """The half-width of the measured band as a fraction of the value."""
        if self.low is None or self.high is None:
            return None
        half = ratio(self.high - self.low, 2 * self.value)
        return None if half is None else max(0.0, half)

    def shown(self) -> str:
        if self.metric == OWN:
            if self.unit == "s":
                return seconds(self.value)
            return f"{self.value:.4g}" if not self.unit and 1e-3 <= self.value < 1e3 \
                else si(self.value, self.unit)
        if self.metric == "mfu":
            return f"{self.value:.1%}"
        if self.metric.endswith("_s"):
            return seconds(self.value)
        unit = {"peak_memory_bytes": "B", "busbw_Bps": "B/s", "copy_bandwidth_Bps": "B/s",
                "peak_flops": "FLOP/s"}.get(self.metric, "")
        return si(self.value, unit)


def ratio(a: float, b: float) -> float | None:
    """a / b as a finite number, or None (a runner's 1e308 over 1e-300 overflows)."""
    try:
        return finite(a / b)
    except (OverflowError, ZeroDivisionError):
        return None


def _band(value: float, median, p10, p90, rate: bool) -> tuple[float | None, float | None]:
    """The band of a number derived from a timing: a time's own p10–p90, or for a rate
    (busbw, MFU: inversely proportional to the time) the rates at the p90 and p10 times."""
    median, p10, p90 = finite(median), finite(p10), finite(p90)
    if not (median and p10 and p90 and median > 0 and p10 > 0):
        return None, None
    if not rate:
        return p10, p90
    low, high = ratio(median, p90), ratio(median, p10)
    if low is None or high is None or finite(value * high) is None:
        return None, None
    return value * low, value * high


def _with_peak(band: tuple, result: dict) -> tuple:
    """MFU's band, widened by the spread of the peak it divides by. The peak is the run's
    own probe wherever no spec sheet gives one (a CPU above all), and it moves between runs
    far more than the step time does: without this, a probe's luck reads as a change."""
    low, high = band
    calibration = _dict(result.get("calibration"))
    spread, kept = _dict(calibration.get("peak_spread")), finite(calibration.get("peak_flops"))
    least, most = finite(spread.get("min")), finite(spread.get("max"))
    if low is None or high is None or not (kept and least and most and least > 0):
        return band
    # MFU goes as 1/peak: any peak the probe saw would have given MFU * kept / that peak
    return low * min(1.0, kept / most), high * max(1.0, kept / least)


def _timed(s: dict) -> tuple:
    """A timing's median, p10 and p90. Fewer than MIN_SERIES timed steps (`n`) measured no
    spread (one step's p10 is its p90): the band is left out, so the number is judged
    against the assumed noise rather than the 1% floor of a spread of nothing."""
    t = s.get("step_time_s")
    if not isinstance(t, dict):
        return (None,) * 3
    n = t.get("n")
    if isinstance(n, int) and not isinstance(n, bool) and n < MIN_SERIES:
        return t.get("median"), None, None
    return t.get("median"), t.get("p10"), t.get("p90")


def headlines(result) -> dict[str, Number]:
    """The run's headline numbers by key (module docstring), at most MAX_NUMBERS."""
    if not isinstance(result, dict):
        return {}
    if result.get("own") is True:
        return {n.key: n for n in own_headlines(result)[:MAX_NUMBERS]}
    found: list[Number] = []
    strategies = result.get("strategies")
    for s in (strategies if isinstance(strategies, list) else [])[:16]:
        name = s.get("strategy") if isinstance(s, dict) else None
        if not (isinstance(name, str) and NAME_RE.fullmatch(name)):
            continue
        if isinstance(s.get("correctness"), dict) and s["correctness"].get("passed") is False:
            continue  # a wrong answer's speed is no trend
        metrics, timed = strategy_metrics(s), _timed(s)
        for metric in ("step_time_s", "mfu", "peak_memory_bytes"):
            if metric in metrics:
                value = metrics[metric]
                band = (None, None) if metric == "peak_memory_bytes" else \
                    _band(value, *timed, rate=metric == "mfu")
                if metric == "mfu":
                    band = _with_peak(band, result)
                found.append(Number(f"{name}.{metric}", f"{name} {LABELS[metric]}", metric,
                                    value, *band))
    rows = result.get("table") if result.get("experiment") == "collectives" \
        or isinstance(result.get("fits"), dict) else None
    for row in (rows if isinstance(rows, list) else [])[:200]:
        if not isinstance(row, dict):
            continue
        op, size, busbw = row.get("op"), finite(row.get("bytes")), finite(row.get("busbw_Bps"))
        if isinstance(op, str) and NAME_RE.fullmatch(op) and size and busbw:
            found.append(Number(f"{op}.busbw_Bps@{int(size)}", f"{op} at {si(size, 'B')}",
                                "busbw_Bps", busbw, *_band(busbw, row.get("time_s"),
                                                           row.get("p10"), row.get("p90"),
                                                           rate=True)))
    if not strategies:
        timed = _timed(result)
        single = {"step_time_s": finite(timed[0]), "mfu": finite(result.get("mfu")),
                  "peak_memory_bytes": finite(result.get("cuda_max_memory_allocated")),
                  "peak_flops": finite(result.get("peak_flops"))
                  if isinstance(result.get("table"), list) else None,
                  "copy_bandwidth_Bps": finite(result.get("copy_bandwidth_Bps"))}
        for metric, value in single.items():
            if value is not None and value > 0:
                band = _band(value, *timed, rate=metric == "mfu") \
                    if metric in ("step_time_s", "mfu") else (None, None)
                if metric == "mfu":
                    band = _with_peak(band, result)
                found.append(Number(metric, LABELS[metric], metric, value, *band))
    # every headline is a positive amount (a time, a rate, bytes, a fraction)
    kept = [n for n in found if n.value > 0][:MAX_NUMBERS]
    return {n.key: n for n in kept}


def _dict(value) -> dict:
    return value if isinstance(value, dict) else {}


def series_spread(points) -> float | None:
    """The half-width of a per-step series' p10–p90 as a fraction of its median."""
    values = sorted(v for p in (points if isinstance(points, list) else [])[:10_000]
                    if isinstance(p, list) and len(p) == 2
                    and (v := finite(p[1])) is not None)
    if len(values) < MIN_SERIES:
        return None
    cuts = statistics.quantiles(values, n=10, method="inclusive")
    median = statistics.median(values)
    return ratio(cuts[8] - cuts[0], 2 * median) if median > 0 else None


def own_headlines(result: dict) -> list[Number]:
    """An own experiment's reported scalars as headline numbers (module docstring)."""
    reported, declared = _dict(result.get("reported")), _dict(result.get("reports"))
    scalars, series = _dict(reported.get("scalars")), _dict(reported.get("series"))
    found = []
    for name, value in list(scalars.items())[:MAX_NUMBERS]:
        value = finite(value) if not isinstance(value, bool) else None
        if not (isinstance(name, str) and NAME_RE.fullmatch(name) and value and value > 0):
            continue  # a change is a ratio: only a positive amount has one
        about = _dict(_dict(declared.get("scalars")).get(name))
        better = about.get("better") if about.get("better") in (HIGHER, LOWER) else ""
        unit = str(about.get("unit") or "")[:20]
        spread = series_spread(series.get(about.get("spread"))) \
            if isinstance(about.get("spread"), str) else None
        band = (value * (1 - spread), value * (1 + spread)) if spread is not None \
            and spread < 1 and finite(value * (1 + spread)) is not None else (None, None)
        found.append(Number(name, name, OWN, value, *band, better=better, unit=unit))
    return found


# -- judging ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Change:
    now: Number
    before: Number | None  # the previous comparable run's
    noise: float  # the fraction a change must exceed to be more than noise
    measured: bool  # whether both runs measured a spread for it
    baseline: float | None = None  # the median of the runs before
    baseline_runs: int = 0

    @property
    def change(self) -> float | None:
        moved = ratio(self.now.value, self.before.value) if self.before else None
        return None if moved is None else moved - 1

    @property
    def baseline_change(self) -> float | None:
        moved = ratio(self.now.value, self.baseline) if self.baseline else None
        return None if moved is None else moved - 1

    @property
    def beyond(self) -> bool:
        return self.change is not None and abs(self.change) > self.noise

    @property
    def regression(self) -> bool:
        """Beyond noise, the wrong way (a number with no direction is never one)."""
        if not self.beyond or not self.now.direction:
            return False
        better_higher = self.now.direction == HIGHER
        return (self.change < 0) if better_higher else (self.change > 0)  # type: ignore[operator]


@dataclass
class Trend:
    run: Run
    previous: Run | None  # the previous successful comparable run
    changes: list[Change] = field(default_factory=list)
    edited_from: Run | None = None  # the schedule's run before, on other parameters
    edited: list[str] = field(default_factory=list)  # the parameters that differ from it

    @property
    def regressions(self) -> list[Change]:
        return [c for c in self.changes if c.regression]


def noise_between(now: Number, before: Number) -> tuple[float, bool]:
    if now.spread is None or before.spread is None:
        return DEFAULT_NOISE, False
    return max(MIN_NOISE, now.spread + before.spread), True


def comparable(session: Session, run: Run, limit: int = BASELINE_RUNS) -> list[Run]:
    """The successful runs with the run's comparison key that finished before it, the
    latest first."""
    if not run.param_key or run.finished_at is None:
        return []
    return list(session.scalars(
        sa.select(Run).where(Run.param_key == run.param_key, Run.id != run.id,
                             Run.status == statuses.SUCCEEDED,
                             Run.finished_at.is_not(None),
                             sa.or_(Run.finished_at < run.finished_at,
                                    sa.and_(Run.finished_at == run.finished_at,
                                            Run.id < run.id)))
        .order_by(Run.finished_at.desc(), Run.id.desc()).limit(limit)))


def trend(session: Session, run: Run) -> Trend | None:
    """The run's changes against the runs before it; None for a run with no numbers."""
    now = headlines(run.result) if run.status == statuses.SUCCEEDED else {}
    if not now:
        return None
    before = comparable(session, run)
    found = Trend(run, before[0] if before else None)
    if found.previous is None or run.schedule_id is not None:
        _edited_schedule(session, found)
    if found.previous is None:
        return found
    numbers = [headlines(r.result) for r in before]
    for key, number in now.items():
        last = numbers[0].get(key)
        history = [n[key].value for n in numbers if key in n]
        noise, measured = noise_between(number, last) if last else (DEFAULT_NOISE, False)
        found.changes.append(Change(number, last, noise, measured,
                                    statistics.median(history) if history else None,
                                    len(history)))
    return found


def _edited_schedule(session: Session, found: Trend) -> None:
    """A schedule's previous finished run, when it measured on other parameters."""
    run = found.run
    if run.schedule_id is None:
        return
    last = session.scalar(
        sa.select(Run).where(Run.schedule_id == run.schedule_id, Run.id < run.id,
                             Run.status == statuses.SUCCEEDED)
        .order_by(Run.id.desc()).limit(1))
    if last is not None and last.param_key != run.param_key:
        found.edited_from = last
        mine, theirs = run.params or {}, last.params or {}
        found.edited = sorted(k for k in {*mine, *theirs} if mine.get(k) != theirs.get(k))


def series(session: Session, *, param_key: str | None = None, schedule_id: int | None = None,
           limit: int = 200) -> list[Run]:
    """Successful runs of one comparison key or one schedule, oldest first (the trend
    page's points)."""
    query = sa.select(Run).where(Run.status == statuses.SUCCEEDED, Run.finished_at.is_not(None))
    if param_key is not None:
        query = query.where(Run.param_key == param_key)
    if schedule_id is not None:
        query = query.where(Run.schedule_id == schedule_id)
    latest = list(session.scalars(query.order_by(Run.finished_at.desc(), Run.id.desc())
                                  .limit(limit)))
    return latest[::-1]


# What, of a run's recorded environment, marks a change on the trend page.
ENVIRONMENT = {"torch": "torch", "cuda": "CUDA", "nccl": "NCCL", "driver": "driver",
               "device_model": "device", "host": "host"}


def environment_changes(before: Run, after: Run) -> list[str]:
    """What differs between two runs' environments: "torch 2.12.0 → 2.13.0"."""
    a = before.environment if isinstance(before.environment, dict) else {}
    b = after.environment if isinstance(after.environment, dict) else {}
    return [f"{label} {str(a.get(k))[:40]} → {str(b.get(k))[:40]}"
            for k, label in ENVIRONMENT.items()
            if k in a and k in b and a.get(k) != b.get(k)]


def when(run: Run) -> dt.datetime:
    return run.finished_at or run.created_at


def signed(change: float) -> str:
    """+4%, −17% (a minus sign, as print has it)."""
    return f"{'+' if change >= 0 else '−'}{abs(change):.0%}"


def judged(c: Change) -> str:
    """The judgement of a change: "beyond its ±3% noise", "within its ±5% noise (no
    measured spread: assumed)"."""
    where = "beyond" if c.beyond else "within"
    assumed = "" if c.measured else " (no measured spread: assumed)"
    return f"{where} its ±{c.noise:.0%} noise{assumed}"
