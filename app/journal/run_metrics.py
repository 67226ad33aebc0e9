"""A run's parameters and scalar results as narrow indexed rows (run_param, run_metric),
so the run list can filter by any parameter and sort by any result without reading a
result JSON.

Parameters: one row per (name, value); a list parameter (strategies, ops) one row per
element, so `param.strategies=1f1b` means "its strategies include 1f1b". Values are
stored as text in one canonical form (`param_text`), the form a URL carries them in.

Results (`derive`): per strategy `<strategy>.<key>` for step_time_s (median), tokens_per_s,
mfu, bubble (measured idle fraction), peak_memory_bytes (the largest rank's measured
peak); per collective `<op>.busbw_Bps` and `<op>.alpha_s`; and per run a headline under
the bare key. A run comparing four strategies has no single step time: its headline is
the *best* strategy's (the lowest step time, bubble and peak memory, the highest tokens/s,
MFU and bus bandwidth), among the strategies that passed their correctness check, leaving
out the single-device reference ("single"), which is the yardstick rather than a
candidate. So "sort by step time" ranks runs by the fastest correct parallel strategy
each one found; `1f1b.step_time_s` asks about one strategy exactly. Single-number
experiments (gpt_mfu, gemm_roofline) give their numbers as headlines directly, and every
result gives duration_s.

Bounded whatever a runner sends: names that are not short identifiers are skipped, at
most MAX_GROUPS strategies or collectives count, and a run has at most MAX_ROWS rows of
each kind. Functions take an open session and never commit.
"""

from __future__ import annotations

import hashlib
import json
import math
import re

import sqlalchemy as sa
from sqlalchemy.orm import Session

from app.journal.numbers import percent, seconds, si
from app.models import Run, RunMetric, RunParam

# The scalar results, and which way is better (the headline takes the best).
LOWER, HIGHER = "lower", "higher"
METRICS = {
    "step_time_s": LOWER, "tokens_per_s": HIGHER, "mfu": HIGHER, "bubble": LOWER,
    "peak_memory_bytes": LOWER, "busbw_Bps": HIGHER, "alpha_s": LOWER,
    "peak_flops": HIGHER, "copy_bandwidth_Bps": HIGHER, "achieved_flops": HIGHER,
    "duration_s": LOWER,
}
LABELS = {  # the run list's sort menu
    "step_time_s": "step time", "tokens_per_s": "tokens/s", "mfu": "MFU",
    "bubble": "bubble", "peak_memory_bytes": "peak memory", "busbw_Bps": "bus bandwidth",
    "alpha_s": "latency α", "peak_flops": "peak FLOP/s", "copy_bandwidth_Bps": "copy bandwidth",
    "achieved_flops": "achieved FLOP/s", "duration_s": "duration",
}
UNITS = {"peak_memory_bytes": "B", "busbw_Bps": "B/s", "copy_bandwidth_Bps": "B/s",
         "peak_flops": "FLOP/s", "achieved_flops": "FLOP/s", "tokens_per_s": "tok/s"}
NAME = r"[A-Za-z0-9_][A-Za-z0-9_-]{0,39}"
NAME_RE = re.compile(NAME)
# what ?sort= takes; written for both Python and OpenAPI's (ECMA) regular expressions
SORT_KEY_PATTERN = rf"^(?:{NAME}\.)?(?:{'|'.join(METRICS)})$"
SORT_KEY_RE = re.compile(SORT_KEY_PATTERN)
MAX_GROUPS = 16  # strategies or collectives per run that get rows
MAX_ROWS = 200  # rows per run, of each kind
MAX_VALUE = 200  # characters of a parameter value that are indexed
PARAM_KEY_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,99}")
# Parameters that say how many samples a run takes, or what it does beside its numbers,
# not what one sample measures: runs that differ only in these measure the same thing,
# so their numbers are compared (app/journal/trends.py). Warm-up is not one of them: a
# step timed without it is a cold step, another quantity.
SAMPLING = frozenset({"steps", "iters", "seed", "measure_overhead"})


# -- parameters ---------------------------------------------------------------------------


def param_text(value) -> str | None:
    """The one text form of a parameter value: true/false, integers without a point
    (2.0 → "2"), other numbers as Python writes them, text as is; None for what cannot be
    a filter (null, objects)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        return str(int(value)) if value.is_integer() and abs(value) < 2**53 else repr(value)
    if isinstance(value, str):
        return value[:MAX_VALUE]
    return None


def query_texts(text: str) -> list[str]:
    """The stored forms a filter's text may match: itself, and its canonical form when it
    reads as a number or a boolean (?param.bucket_cap_mb=0.250 finds 0.25)."""
    forms = [text[:MAX_VALUE]]
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        forms.append(lowered)
    else:
        try:
            number = float(text)
        except ValueError:
            number = None
        if number is not None and math.isfinite(number):
            forms.append(param_text(number))
    return list(dict.fromkeys(forms))


def param_rows(params) -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []
    for key, value in (params.items() if isinstance(params, dict) else ()):
        if not (isinstance(key, str) and PARAM_KEY_RE.fullmatch(key)):
            continue
        for item in value if isinstance(value, list) else [value]:
            text = param_text(item)
            if text is not None:
                rows.append((key, text))
    return list(dict.fromkeys(rows))[:MAX_ROWS]


def comparison_key(experiment: str, params) -> str:
    """Runs with the same key measured the same thing: the experiment and its parameters,
    less the SAMPLING ones, in one canonical JSON form."""
    kept = {k: v for k, v in params.items() if k not in SAMPLING} \
        if isinstance(params, dict) else {}
    text = json.dumps([experiment, kept], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def index_params(session: Session, run: Run) -> None:
    """run_param rows for a new run (its parameters are frozen at enqueue), and the key
    that finds the runs it is compared with."""
    run.param_key = comparison_key(run.experiment, run.params)
    rows = [{"run_id": run.id, "key": k, "value": v} for k, v in param_rows(run.params)]
    if rows:
        session.execute(sa.insert(RunParam), rows)


# -- results ------------------------------------------------------------------------------


def _num(value) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) \
            and math.isfinite(value):
        return float(value)
    return None


def _get(data, *path):
    for step in path:
        if not isinstance(data, dict):
            return None
        data = data.get(step)
    return data


def strategy_metrics(s: dict) -> dict[str, float]:
    peaks = [_num(_get(m, "peak", "measured")) for m in s.get("memory") or []
             if isinstance(m, dict)] if isinstance(s.get("memory"), list) else []
    peaks = [p for p in peaks if p is not None]
    found = {
        "step_time_s": _num(_get(s, "step_time_s", "median")),
        "tokens_per_s": _num(s.get("tokens_per_s")),
        "mfu": _num(_get(s, "mfu", "value")),
        "bubble": _num(_get(s, "bubble", "measured_idle_fraction")),
        "peak_memory_bytes": max(peaks) if peaks else None,
    }
    return {k: v for k, v in found.items() if v is not None}


def _best(groups: list[dict[str, float]]) -> dict[str, float]:
    best: dict[str, float] = {}
    for metrics in groups:
        for key, value in metrics.items():
            if key not in best:
                best[key] = value
            else:
                pick = min if METRICS[key] == LOWER else max
                best[key] = pick(best[key], value)
    return best


def derive(result) -> dict[str, float]:
    """The run's scalar results, keyed as the run list sorts by them (module docstring)."""
    if not isinstance(result, dict):
        return {}
    out: dict[str, float] = {}
    candidates: list[dict[str, float]] = []
    strategies = result.get("strategies")
    for s in (strategies if isinstance(strategies, list) else [])[:MAX_GROUPS]:
        name = s.get("strategy") if isinstance(s, dict) else None
        if not (isinstance(name, str) and NAME_RE.fullmatch(name)):
            continue
        metrics = strategy_metrics(s)
        out.update({f"{name}.{k}": v for k, v in metrics.items()})
        passed = _get(s, "correctness", "passed")
        if name != "single" and passed is not False:
            candidates.append(metrics)
    fits = result.get("fits")
    for op, fit in list(fits.items() if isinstance(fits, dict) else ())[:MAX_GROUPS]:
        if not (isinstance(op, str) and NAME_RE.fullmatch(op) and isinstance(fit, dict)):
            continue
        metrics = {k: v for k in ("busbw_Bps", "alpha_s")
                   if (v := _num(fit.get(k))) is not None}
        out.update({f"{op}.{k}": v for k, v in metrics.items()})
        candidates.append(metrics)
    out.update(_best(candidates))
    top = {"step_time_s": _num(_get(result, "step_time_s", "median")),
           "peak_memory_bytes": _num(result.get("cuda_max_memory_allocated"))}
    for key in ("tokens_per_s", "mfu", "peak_flops", "copy_bandwidth_Bps", "achieved_flops",
                "duration_s"):
        top[key] = _num(result.get(key))
    for key, value in top.items():
        if value is not None:
            out.setdefault(key, value)
    return dict(list(out.items())[:MAX_ROWS])


def index_result(session: Session, run: Run) -> None:
    """run_metric rows from the run's result, replacing any from an earlier report."""
    session.execute(sa.delete(RunMetric).where(RunMetric.run_id == run.id))
    rows = [{"run_id": run.id, "key": k, "value": v} for k, v in derive(run.result).items()]
    if rows:
        session.execute(sa.insert(RunMetric), rows)


def check_sort_key(key: str) -> bool:
    """A key the run list can sort by: a result name, alone or after a strategy or
    collective name (`mfu`, `1f1b.step_time_s`, `all_reduce.busbw_Bps`)."""
    return bool(SORT_KEY_RE.fullmatch(key))


def shown(key: str, value: float | None) -> str:
    """A sorted result as the run list shows it (1.2 ms, 38%, 5.4 MB)."""
    if value is None:
        return "–"
    metric = key.rpartition(".")[2]
    if metric in ("mfu", "bubble"):
        return percent(value)
    if metric in UNITS:  # before the "_s" ending: tokens_per_s is a rate, not a time
        return si(value, UNITS[metric])
    if metric.endswith("_s"):
        return seconds(value)
    return si(value)
