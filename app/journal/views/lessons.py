"""What a training run teaches, in words: two or three sentences per card, each computed
from the numbers in the result (the cost model's terms, the measurement, the memory),
never canned. Rules say what dominated and why; one says what to change to see the
textbook effect. `training(result)` returns plain sentences (the card escapes them);
hardware_lessons.py says what a measurement of the hardware teaches, with `num`.

A rule returns None when its numbers are missing, so any result, however partial or
hostile, gives what can be said and nothing else.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from app.journal.numbers import finite, percent, ratio, seconds, si
from app.journal.views.advice import bubble, communication

TERMS = {"gemm": "matrix multiplies", "attention": "attention", "op_overhead":
         "per-operator overhead", "memory_traffic": "memory traffic", "comm":
         "communication", "bubble": "the pipeline bubble",
         "hooks": "the wrapper's own Python (its hooks)"}
MAX_STRATEGIES = 32


def num(data, *path) -> float | None:
    """A finite number found along keys and indexes, or None."""
    for key in path:
        if isinstance(key, int) and isinstance(data, list) and -len(data) <= key < len(data):
            data = data[key]
        elif isinstance(key, str) and isinstance(data, dict):
            data = data.get(key)
        else:
            return None
    return finite(data)


def name_of(value, limit: int = 40) -> str:
    return str(value)[:limit] if value is not None else "?"


@dataclass
class Timed:
    """One strategy that passed its gate and was timed."""

    name: str
    step: float
    predicted: float | None
    terms: dict[str, float]
    tokens: float | None
    raw: dict

    @property
    def dominant(self) -> tuple[str, float] | None:
        return max(self.terms.items(), key=lambda kv: kv[1]) if self.terms else None


def timed(result: dict) -> list[Timed]:
    out = []
    for s in (result.get("strategies") or [])[:MAX_STRATEGIES]:
        if not isinstance(s, dict) or not (s.get("correctness") or {}).get("passed"):
            continue
        step = num(s, "step_time_s", "median")
        if step is None or step <= 0:
            continue
        terms = (s.get("prediction") or {}).get("terms_s")
        terms = {str(k): x for k, v in terms.items() if (x := finite(v)) is not None
                 and x >= 0} if isinstance(terms, dict) else {}
        out.append(Timed(name_of(s.get("strategy")), step, num(s, "prediction", "step_time_s"),
                         terms, num(s, "tokens_per_s"), s))
    return out


def _failed(result: dict) -> str | None:
    bad = [s for s in (result.get("strategies") or [])[:MAX_STRATEGIES] if isinstance(s, dict)
           and isinstance(s.get("correctness"), dict) and not s["correctness"].get("passed")]
    if not bad:
        return None
    names = ", ".join(name_of(s.get("strategy")) for s in bad[:4])
    reason = name_of(bad[0]["correctness"].get("reason") or "no reason given", 120)
    return (f"{len(bad)} strateg{'y' if len(bad) == 1 else 'ies'} ({names}) failed the "
            f"correctness gate and {'was' if len(bad) == 1 else 'were'} not timed: {reason}.")


def _slower_than_naive(runs: list[Timed]) -> tuple[Timed | None, list[Timed]]:
    """naive_mp, and the micro-batched schedules slower than it (single has none either)."""
    naive = next((t for t in runs if t.name == "naive_mp"), None)
    return naive, [t for t in runs if naive is not None and t.name not in ("naive_mp", "single")
                   and t.step > naive.step]


def _pipeline(runs: list[Timed], m: float | None, slowdown: float | None) -> str | None:
    """Micro-batches against no micro-batches: the overhead they add vs the bubble they
    save - or, when the ranks took turns on shared cores, that no schedule can overlap
    stages here."""
    naive, split = _slower_than_naive(runs)
    if naive is None or not split or not m or m < 2:
        return None
    slow = max(split, key=lambda t: t.step)
    if slowdown and slowdown > 1.5:
        return (f"{slow.name} is slower than naive model parallel here ({seconds(slow.step)} "
                f"vs {seconds(naive.step)} a step) because this host cannot run the stages "
                f"at once: computing together slowed each rank {slowdown:.2g}× (1× when each "
                "has a core of its own), so micro-batches only add their overhead; on free "
                "cores or GPUs the bubble formula's saving appears.")
    saved = naive.terms.get("bubble", 0) - slow.terms.get("bubble", 0)
    # What micro-batching added, every term but the bubble: per-operator overhead, and the
    # smaller micro-batches' matrix multiplies where the calibration found them less
    # efficient per token - the model's own total, not one of its terms.
    grew = {k: v - naive.terms.get(k, 0) for k, v in slow.terms.items() if k != "bubble"}
    cost = max(sum(grew.values()), 0)
    head = (f"{slow.name} is slower than naive model parallel here ({seconds(slow.step)} vs "
            f"{seconds(naive.step)} a step)")
    if saved > cost:  # the model expected a net saving: the stages did not overlap
        return (f"{head}, although the cost model expected micro-batches to save "
                f"{seconds(saved - cost)} net ({seconds(saved)} of bubble): its stages "
                "did not run side by side as the formula assumes, as when other work shares "
                "the cores.")
    # Per-operator overhead first (what more work per micro-batch outweighs), then the
    # largest other term that grew.
    named = sorted(((k, v) for k, v in grew.items() if v > 0),
                   key=lambda kv: (kv[0] != "op_overhead", -kv[1]))[:2]
    if not named:
        return None
    why = f"splitting the batch into {m:g} micro-batches adds " + " and ".join(
        f"{seconds(v)} of per-operator overhead ({seconds(v / m)} per micro-batch × {m:g})"
        if k == "op_overhead" else f"{seconds(v)} of {TERMS.get(k, k)}" for k, v in named)
    if saved <= 0:
        verdict = "and in the cost model it saves no bubble time"
    else:
        verdict = (f"{seconds(cost)} in all, " if len(named) > 1 else "") + \
            f"more than the {seconds(saved)} of bubble it saves"
    return f"{head}: {why}, {verdict}; each micro-batch is too small to fill the device."


def _gap(runs: list[Timed]) -> str | None:
    """Fastest against slowest, and the predicted term that grew the most between them."""
    if len(runs) < 2:
        return None
    fast, slow = min(runs, key=lambda t: t.step), max(runs, key=lambda t: t.step)
    if slow.step < 1.2 * fast.step:
        return (f"All {len(runs)} strategies took within 20% of each other "
                f"({seconds(fast.step)}–{seconds(slow.step)} a step).")
    text = (f"{fast.name} was fastest ({seconds(fast.step)} a step) and {slow.name} slowest "
            f"({seconds(slow.step)}, {ratio(slow.step / fast.step)})")
    grew = {k: v - fast.terms.get(k, 0) for k, v in slow.terms.items()}
    term, delta = max(grew.items(), key=lambda kv: kv[1], default=("", 0.0))
    if delta > 0:
        text += (f"; the cost model puts most of the gap in {TERMS.get(term, term)} "
                 f"({seconds(slow.terms[term])} vs {seconds(fast.terms.get(term, 0))})")
    return text + "."


@dataclass
class Verdict:
    """The one analysis of what dominated, which the story and the advice both use: the
    strategy the model explains worst when one is outside 1.5x, else the slowest; what
    dominated it is the unexplained residual when that outweighs every predicted term,
    else its largest predicted term."""

    subject: Timed
    term: str  # a key of TERMS, a mesh's *_comm, or "unexplained"
    seconds: float


def _worst(runs: list[Timed]) -> Timed | None:
    judged = [t for t in runs if t.predicted and t.predicted > 0]
    return max(judged, key=lambda t: abs(math.log(t.step / t.predicted)), default=None)


def verdict(runs: list[Timed]) -> Verdict | None:
    worst = _worst(runs)
    if worst is None:
        return None
    subject = worst if not 0.67 <= worst.step / worst.predicted <= 1.5 else \
        max((t for t in runs if t.predicted and t.predicted > 0), key=lambda t: t.step)
    dom = subject.dominant
    residual = subject.step - subject.predicted
    if dom is None or residual > dom[1]:
        return Verdict(subject, "unexplained", residual)
    return Verdict(subject, *dom)


def _off(t: Timed) -> str:
    """Which side of the prediction was off (the lab's own analysis), as a clause."""
    off = (t.raw.get("prediction") or {}).get("off")
    why = off.get("why") if isinstance(off, dict) else None
    return f"; off on {name_of(why, 160)}" if isinstance(why, str) else ""


def _underpriced(t: Timed, residual: float) -> tuple[str, float, float] | None:
    """The priced term the lab measured taking more than its price, where that excess is
    most of the residual (the model priced the cost too low rather than lacking it): its
    name, measured and priced seconds."""
    off = (t.raw.get("prediction") or {}).get("off")
    if not isinstance(off, dict):
        return None
    measured, priced = num(off, "measured_s"), num(off, "predicted_s")
    if measured is None or priced is None or residual <= 0 or measured - priced < residual / 2:
        return None
    return name_of(off.get("term"), 40), measured, priced


def _model(runs: list[Timed]) -> str | None:
    """The strategy the model explains worst, and whether its residual outweighs every term."""
    worst = _worst(runs)
    if worst is None:
        return None
    r = worst.step / worst.predicted
    dom = worst.dominant
    if 0.67 <= r <= 1.5:
        share = f" ({TERMS.get(dom[0], dom[0])} {percent(dom[1] / worst.predicted)} of it)" \
            if dom else ""
        return (f"The cost model holds: every strategy's step is within a factor "
                f"{max(r, 1 / r):.2f} of its prediction; "
                f"{worst.name} {seconds(worst.step)} measured vs {seconds(worst.predicted)} "
                f"predicted{share}.")
    residual = worst.step - worst.predicted
    text = (f"{worst.name} took {seconds(worst.step)} against {seconds(worst.predicted)} "
            f"predicted ({ratio(r)}){_off(worst)}")
    under = _underpriced(worst, residual) if dom and residual > dom[1] else None
    if under:
        text += (f": those {seconds(under[1] - under[2])} beyond its price are most of the "
                 f"{seconds(residual)} the model leaves unexplained, so what dominated is "
                 f"{under[0]}, priced too low")
    elif dom and residual > dom[1]:
        missing = (worst.raw.get("prediction") or {}).get("unmodelled") or []
        lacks = f" ({name_of(missing[0], 90)})" if isinstance(missing, list) and missing else ""
        text += (f": the {seconds(residual)} the model leaves unexplained is more than its "
                 f"largest term, {TERMS.get(dom[0], dom[0])} at {seconds(dom[1])}, so what "
                 f"dominated is something the model lacks{lacks}")
    elif dom:
        text += f"; its largest predicted term is {TERMS.get(dom[0], dom[0])} ({seconds(dom[1])})"
    return text + "."


def _state(s: dict, key: str = "measured") -> tuple[float, dict] | None:
    mem = s.get("memory")
    if not isinstance(mem, list) or not mem or not isinstance(mem[0], dict):
        return None
    parts = {k: num(mem[0], key, k) for k in ("params", "grads", "optimizer")}
    total = num(mem[0], key, "total")
    return (total, parts) if total else None


def _memory(runs: list[Timed]) -> str | None:
    """Sharding: model state per rank, smallest against largest, and the peak around it."""
    held = [(t, st) for t in runs if (st := _state(t.raw))]
    if len(held) < 2:
        return None
    (big, (b_total, b_parts)), (small, (s_total, s_parts)) = (
        max(held, key=lambda h: h[1][0]), min(held, key=lambda h: h[1][0]))
    if s_total >= 0.95 * b_total:
        return None
    smaller = [k for k in ("params", "grads", "optimizer")
               if (b_parts[k] or 0) > 0 and (s_parts[k] or 0) < 0.95 * b_parts[k]]
    text = (f"{small.name} holds {si(s_total, 'B')} of model state per rank against "
            f"{big.name}'s {si(b_total, 'B')} ({percent(1 - s_total / b_total)} less: "
            f"{', '.join(smaller) or 'state'} sharded)")
    rank0 = small.raw["memory"][0]
    peak, act = num(rank0, "peak", "measured"), num(rank0, "saved_activation_peak_bytes")
    if peak and act and act / peak > 0.4:
        text += (f", but activations ({si(act, 'B')}) are {percent(act / peak)} of its "
                 f"{si(peak, 'B')} peak, which sharding state does not touch")
    return text + "."


def _scaling(runs: list[Timed], ranks: float | None) -> str | None:
    single = next((t for t in runs if t.name == "single"), None)
    others = [t for t in runs if t is not single and t.tokens]
    if single is None or not single.tokens or not others or not ranks or ranks < 2:
        return None
    best = max(others, key=lambda t: t.tokens)
    speedup = best.tokens / single.tokens
    return (f"On {ranks:g} ranks the best, {best.name}, reaches {ratio(speedup)} single's "
            f"tokens/s ({percent(speedup / ranks)} scaling efficiency).")


def _change_training(result: dict, runs: list[Timed]) -> str | None:
    """What to change, from the one verdict of what dominated (verdict())."""
    params = result.get("params") if isinstance(result.get("params"), dict) else {}
    found = verdict(runs)
    if found is None:
        return None
    term, value = found.term, found.seconds
    under = _underpriced(found.subject, value) if term == "unexplained" else None
    if under:
        return (f"To see where {found.subject.name}'s unexplained {seconds(value)} went, open "
                f"its timeline: most of it is {under[0]}, measured at {seconds(under[1])} "
                f"against the {seconds(under[2])} it was priced at.")
    if term == "unexplained":
        missing = (found.subject.raw.get("prediction") or {}).get("unmodelled") or []
        lacks = name_of(missing[0], 90) if isinstance(missing, list) and missing else \
            "a cost it does not model"
        return (f"To see where {found.subject.name}'s unexplained {seconds(value)} went, open "
                f"its timeline: the model lacks {lacks}.")
    hidden, batch = num(params, "hidden"), num(params, "batch_size")
    m, p = num(params, "micro_batches"), num(params, "world_size")
    device = name_of((result.get("environment") or {}).get("device") or "device"
                     if isinstance(result.get("environment"), dict) else "device")
    if term in ("op_overhead", "memory_traffic", "hooks") and hidden:
        more = f"hidden {hidden:g} → {hidden * 4:g}" + (f" or batch_size {batch:g} → "
                                                          f"{batch * 4:g}" if batch else "")
        tail = (f"; then more micro-batches shrink the bubble (p−1)/(m+p−1) from "
                f"{percent((p - 1) / (m + p - 1))} at m={m:g} to "
                f"{percent((p - 1) / (2 * m + p - 1))} at m={2 * m:g}") if m and p and m > 1 \
            else ""
        return (f"To see the textbook effect, give each operator more work ({more}) so that "
                f"compute, not {TERMS[term]} ({seconds(value)}), fills the {device}{tail}.")
    if term == "comm" or term.endswith("_comm"):
        return communication(found.subject.name, found.subject.raw.get("comm"), value,
                             batch, (found.subject.raw.get("prediction") or {}).get("off"))
    if term == "bubble" and m and p:
        shared = (num(result, "calibration", "concurrency", "slowdown_all_at_once") or 1) > 1.5
        lost = bool(_slower_than_naive(runs)[1])
        return bubble(found.subject.name, value, m, p, batch, lost, shared)
    return None


def _bubble(runs: list[Timed]) -> str | None:
    rows = [(t, num(t.raw, "bubble", "measured_idle_fraction"), num(t.raw, "bubble",
                                                                     "predicted")) for t in runs]
    rows = [(t, a, b) for t, a, b in rows if a is not None and b is not None]
    if not rows:
        return None
    t, measured, predicted = max(rows, key=lambda r: abs(r[1] - r[2]))
    return (f"{t.name}'s stages sat idle {percent(measured)} of each step against "
            f"{percent(predicted)} from the bubble formula (p−1)/(m+p−1).")


def training(result: dict) -> list[str]:
    runs = timed(result)
    params = result.get("params") if isinstance(result.get("params"), dict) else {}
    slowdown = num(result, "calibration", "concurrency", "slowdown_all_at_once")
    why = [x for x in (_failed(result), _pipeline(runs, num(params, "micro_batches"), slowdown),
                       _memory(runs), _model(runs), _gap(runs), _bubble(runs),
                       _scaling(runs, num(params, "world_size"))) if x]
    change = _change_training(result, runs)
    return why[:2] + ([change] if change else [])
