"""What the run pages say about a run beyond its card: duration, how it was triggered,
the headline numbers of a result (for comparing runs side by side), correctness checks.

Plain functions of a Run, so the compare table and the run page agree on every number.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from app.journal import numbers
from app.journal.views import card_own
from app.models import Run, utcnow
from base.contract import progress_words


def duration(run: Run, now: dt.datetime | None = None) -> str:
    """How long it ran (or has been running); "–" before it started."""
    start = run.started_at or run.leased_at
    if start is None:
        return "–"
    end = run.finished_at or (now or utcnow())
    return span((end - start).total_seconds())


def span(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m {seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m"


def progress_text(run: Run) -> str:
    """"step 3 of 40 · warm-up", "loading torch" ("" before the run has said anything)."""
    return progress_words(run.progress_step or 0, run.progress_total or 0, run.progress or {})


def progress_extras(run: Run) -> list[tuple[str, str]]:
    """The runner's latest key=values (current strategy, throughput, …) for display."""
    out = []
    for key, value in (run.progress or {}).items():
        if key == "phase":  # (in progress_text's words)
            continue
        if isinstance(value, float):
            value = numbers.si(value) if abs(value) >= 1000 else f"{value:.4g}"
        out.append((key.replace("_", " "), str(value)))
    return out


# -- headline metrics ---------------------------------------------------------------------


@dataclass(frozen=True)
class Metric:
    label: str
    value: float | None
    text: str
    better: str = ""  # "higher" or "lower": which way a change is an improvement
    fraction: bool = False  # a share of a whole (MFU): a change is in percentage points
    signed: bool = False  # may be below zero (time left unexplained): no ratio of it


def _num(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
        else None


def headline(run: Run) -> dict[str, list[Metric]]:
    """Groups of numbers worth putting side by side: one group per strategy (training
    experiments), per collective (the sweep), or one for the whole result (an own
    experiment's reported scalars among them)."""
    result = run.result or {}
    groups: dict[str, list[Metric]] = {}
    if isinstance(result.get("reported"), dict):  # an own experiment: its scalars, as declared
        groups["reported"] = [
            Metric(name, _num(value), card_own.number(value, str(about.get("unit") or "")),
                   about.get("better") if about.get("better") in ("higher", "lower") else "")
            for name, value, about in card_own.scalars(result)]
    elif isinstance(result.get("strategies"), list):
        for s in result["strategies"]:
            if not isinstance(s, dict):
                continue
            step = s.get("step_time_s") or {}
            pred = s.get("prediction") or {}
            check = s.get("correctness") or {}
            mfu = _num((s.get("mfu") or {}).get("value"))
            ratio = _num((s.get("ratios") or {}).get("step_time"))
            memory = _num((s.get("ratios") or {}).get("memory_peak"))
            residual = _num(pred.get("residual_s"))
            groups[str(s.get("label") or s.get("strategy"))] = [
                Metric("step time (median)", _num(step.get("median")),
                       numbers.seconds(_num(step.get("median"))), "lower"),
                Metric("predicted", _num(pred.get("step_time_s")),
                       numbers.seconds(_num(pred.get("step_time_s")))),
                Metric("measured / predicted", ratio, numbers.ratio(ratio)),
                Metric("unexplained", residual, signed(numbers.seconds(residual)),
                       signed=True),
                Metric("memory / predicted", memory, numbers.ratio(memory)),
                Metric("tokens/s", _num(s.get("tokens_per_s")),
                       numbers.si(_num(s.get("tokens_per_s"))), "higher"),
                Metric("MFU", mfu, _share(mfu), "higher", fraction=True),
                Metric("correct", None, "✓" if check.get("passed") else
                       ("✗" if check else "–")),
            ]
    elif isinstance(result.get("fits"), dict):
        for op, fit in result["fits"].items():
            if isinstance(fit, dict):
                alpha, busbw = _num(fit.get("alpha_s")), _num(fit.get("busbw_Bps"))
                groups[str(op)] = [
                    Metric("latency α", alpha, numbers.seconds(alpha), "lower"),
                    Metric("bus bandwidth", busbw, numbers.si(busbw, "B/s"), "higher"),
                ]
    else:
        items = []
        for key, label, fmt, better in (
                ("tokens_per_s", "tokens/s", numbers.si, "higher"),
                ("achieved_flops", "achieved", lambda v: numbers.si(v, "FLOP/s"), "higher"),
                ("mfu", "MFU", _share, "higher"),
                ("peak_flops", "peak", lambda v: numbers.si(v, "FLOP/s"), "higher"),
                ("copy_bandwidth_Bps", "copy bandwidth", lambda v: numbers.si(v, "B/s"),
                 "higher")):
            value = _num(result.get(key))
            if value is not None:
                items.append(Metric(label, value, fmt(value), better, fraction=key == "mfu"))
        if items:
            groups["result"] = items
    return groups


def _share(value: float | None) -> str:
    """A fraction as a percentage, a small one not rounded to 0%."""
    if value is None:
        return "–"
    return f"{value:.1%}" if abs(value) < 0.1 else f"{value:.0%}"


def signed(text: str) -> str:
    """A minus sign, not a hyphen, wherever a number is negative: "−3.82 ms", "−12%"."""
    return text.replace("-", "\u2212", 1) if text.startswith("-") else text


def change(base: Metric | None, other: Metric | None) -> tuple[str, str]:
    """(text, class) for `other` beside `base`: "+12%" marked better or worse; for a share
    (MFU), the change in points ("+1.2 pt"). None for a quantity that is signed (time left
    unexplained) or starts from nothing: a ratio of those reads as nonsense ("-524%")."""
    if base is None or other is None or base.value is None or other.value is None:
        return "", ""
    if base.fraction:
        delta = other.value - base.value
        text = signed(f"{delta * 100:+.1f} pt")
        if abs(delta) < 0.0005:
            return "±0 pt", "same"
    else:
        if base.signed or base.value <= 0 or other.value < 0:
            return "", ""
        delta = other.value / base.value - 1
        if abs(delta) < 0.005:
            return "±0%", "same"
        text = signed(f"{delta:+.0%}")
    good = (delta > 0) == (base.better == "higher")
    return text, ("" if not base.better else ("better" if good else "worse"))


# -- correctness --------------------------------------------------------------------------


def checks(run: Run) -> list[dict]:
    """Each strategy's check against the single-device reference, failures first."""
    rows = []
    for s in (run.result or {}).get("strategies") or []:
        if not isinstance(s, dict) or not isinstance(s.get("correctness"), dict):
            continue
        c = s["correctness"]
        rows.append({
            "strategy": str(s.get("label") or s.get("strategy")),
            "passed": bool(c.get("passed")),
            "reason": c.get("reason") or "",
            "steps": c.get("steps_checked") if isinstance(c.get("steps_checked"), int) else None,
            "loss_error": _num(c.get("loss_abs_error")),
            "grad_error": _num(c.get("max_grad_abs_error")),
            "param_error": _num(c.get("max_param_abs_error")),
            "state_error": _num(c.get("max_state_abs_error")),
        })
    return sorted(rows, key=lambda r: r["passed"])


def result_problem(run: Run) -> str:
    """The lab's own verdict when it failed (e.g. a correctness gate), as one line."""
    reason = (run.result or {}).get("reason")
    if isinstance(reason, dict):
        return ": ".join(str(reason[k]) for k in ("code", "message") if reason.get(k))
    return str(reason) if reason else ""


def oldest_first(group: list[Run]) -> list[Run]:
    """Runs in the order they were made: the oldest is the baseline, so a change reads as
    what the newer run did (+12% = the new run is 12% higher)."""
    return sorted(group, key=lambda run: (run.created_at, run.id))


def side_by_side(groups: list[dict[str, list[Metric]]]) -> list[tuple[str, list[tuple]]]:
    """Rows for the compare table: [(group, [(label, [(text, change, class) per run])])],
    every change against the first run (the baseline: `oldest_first` puts it there)."""
    table = []
    for name in dict.fromkeys(g for run in groups for g in run):
        by_run = [{m.label: m for m in run.get(name, [])} for run in groups]
        labels = list(dict.fromkeys(label for metrics in by_run for label in metrics))
        rows = []
        for label in labels:
            base = by_run[0].get(label)
            cells = []
            for i, metrics in enumerate(by_run):
                metric = metrics.get(label)
                text, css = change(base, metric) if i else ("", "")
                cells.append((metric.text if metric else "–", text, css))
            rows.append((label, cells))
        table.append((name, rows))
    return table
