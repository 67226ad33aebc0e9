"""What a measurement of the hardware teaches, in words (the card's lessons, as lessons.py's
for a training run): where a collective's latency gives way to its bandwidth, where the
GEMM roofline's ridge lies and which shapes sit under which roof, how far a model's MFU is
from the peak. Each sentence is computed from the result's numbers, and a rule whose
numbers are missing says nothing.
"""

from __future__ import annotations

from app.journal.numbers import finite, percent, seconds, si
from app.journal.views.lessons import name_of, num

# An α–β fit that misses its samples by more than this (rms) is not read as the link's.
ROUGH = 0.3


def collectives(result: dict) -> list[str]:
    fits = result.get("fits") if isinstance(result.get("fits"), dict) else {}
    factors = result.get("factors") if isinstance(result.get("factors"), dict) else {}
    rows = [r for r in (result.get("table") or [])[:2000] if isinstance(r, dict)]
    fitted = {str(op): f for op, f in list(fits.items())[:16] if isinstance(f, dict)
              and (num(f, "alpha_s") or 0) > 0 and (num(f, "busbw_Bps") or 0) > 0}
    if not fitted:
        return []
    op = "all_reduce" if "all_reduce" in fitted else next(iter(fitted))
    alpha, bw = num(fitted[op], "alpha_s"), num(fitted[op], "busbw_Bps")
    half = alpha * bw / (finite(factors.get(op)) or 1.0)  # where latency = bandwidth time
    mine = [r for r in rows if str(r.get("op")) == op and (num(r, "bytes") or 0) > 0
            and num(r, "busbw_Bps") is not None]
    rms, why = num(fitted[op], "rms_rel_error"), _fallback(fitted[op])
    if why or (rms and rms > ROUGH):  # the flag where the lab's result has it, else the error
        return _rough(result, op, alpha, bw, rms, mine, why)
    out = [f"{op}: latency α = {seconds(alpha)} and bus bandwidth W = {si(bw, 'B/s')}, so a "
           f"message must reach about {si(half, 'B')} before moving it costs more than "
           "starting it"]
    if mine:
        big = max(mine, key=lambda r: num(r, "bytes"))
        out[0] += (f"; the largest measured ({si(num(big, 'bytes'), 'B')}) reached "
                   f"{si(num(big, 'busbw_Bps'), 'B/s')}, {percent(num(big, 'busbw_Bps') / bw)} "
                   "of W")
    out[0] += "."
    guessed = next((kv for kv in fitted.items() if _fallback(kv[1])), None)
    rough = max(fitted.items(), key=lambda kv: num(kv[1], "rms_rel_error") or 0)
    rms = num(rough[1], "rms_rel_error")
    if rms and rms > ROUGH and not (guessed and guessed[0] == rough[0]):
        out.append(f"The α–β line misses {rough[0]}'s samples by {percent(rms)} (rms): this "
                   "link is not a straight line, so read the points, not the fit.")
    if guessed:
        out.append(f"No α–β line fits {guessed[0]}'s samples ({_fallback(guessed[1])}): "
                   "its α and W are a guess, so read the points, not the fit.")
    largest = max((num(r, "bytes") or 0 for r in rows), default=0)
    if largest and largest < half:
        out.append(f"To see the bandwidth plateau, raise max_bytes past {si(half, 'B')} "
                   f"(now {si(largest, 'B')}).")
    else:
        out.append("To see the latency floor, lower min_bytes: below "
                   f"{si(half, 'B')} every {op} costs about {seconds(alpha)}.")
    return out


def _fallback(fit: dict) -> str | None:
    """Why the lab's fit fell back to a guess, as the result says: None where a line
    fitted, and in a result written before the fit said so (only its error tells then)."""
    why = fit.get("fallback")
    return why[:200] if isinstance(why, str) and why else None


def _rough(result: dict, op: str, alpha: float, bw: float, rms: float | None,
           mine: list[dict], fallback: str | None = None) -> list[str]:
    """A fit that fell back to a guess or misses its own samples: its α and W describe no
    link (where the times did not grow with the size, the lab's fit falls back to a W a
    thousand times the largest sample's), so the lesson is the best point measured and how
    to measure again."""
    if fallback:
        text = (f"{op}: no α–β line fits the samples ({fallback}), so the fit's α = "
                f"{seconds(alpha)} and W = {si(bw, 'B/s')} are a guess, not this link's")
    else:
        text = (f"{op}: the α–β fit (α = {seconds(alpha)}, W = {si(bw, 'B/s')}) misses its "
                f"samples by {percent(rms)} (rms), so neither number is this link's")
    if mine:
        best = max(mine, key=lambda r: num(r, "busbw_Bps"))
        text += (f"; the best measured was {si(num(best, 'busbw_Bps'), 'B/s')} "
                 f"({si(num(best, 'bytes'), 'B')} in {seconds(num(best, 'time_s'))})")
    iters = num(result, "params", "iters")
    more = f"more iters (now {iters:g})" if iters else "more iters"
    return [text + ".", f"To measure the link, run it again on an idle machine or with "
                        f"{more}: every other prediction is built on these numbers."]


def roofline(result: dict) -> list[str]:
    peak, bw = num(result, "peak_flops"), num(result, "copy_bandwidth_Bps")
    rows = [r for r in (result.get("table") or [])[:200] if isinstance(r, dict)
            and num(r, "flops_per_s") and num(r, "intensity_flop_per_byte")]
    if not peak or not bw or not rows:
        return []
    ridge = peak / bw

    def shape(r: dict) -> str:
        return "×".join(name_of(r.get(k), 8) for k in ("M", "N", "K"))

    out = [f"The ridge is at {ridge:.3g} FLOP/B (peak {si(peak, 'FLOP/s')} ÷ copy bandwidth "
           f"{si(bw, 'B/s')}): a GEMM doing fewer FLOPs per byte is held back by memory, "
           "more by compute."]
    judged = [r for r in rows if num(r, "fraction_of_bound")]
    if judged:
        low = min(judged, key=lambda r: num(r, "fraction_of_bound"))
        out.append(f"{shape(low)} reached {si(num(low, 'flops_per_s'), 'FLOP/s')}, "
                   f"{percent(num(low, 'fraction_of_bound'))} of its roof at intensity "
                   f"{num(low, 'intensity_flop_per_byte'):.3g} FLOP/B: the furthest below.")
    below = [r for r in rows if num(r, "intensity_flop_per_byte") < ridge]
    top = max(rows, key=lambda r: num(r, "intensity_flop_per_byte"))
    if len(below) == len(rows):
        out.append(f"To see the compute roof, add larger square sizes: the most intense, "
                   f"{shape(top)}, does {num(top, 'intensity_flop_per_byte'):.3g} FLOP/B, "
                   f"below the ridge at {ridge:.3g}.")
    elif not below:
        out.append(f"To see the memory slope, add thin shapes (small K) below {ridge:.3g} "
                   "FLOP/B.")
    else:
        out.append(f"{len(below)} of {len(rows)} GEMMs sit under the memory slope and "
                   f"{len(rows) - len(below)} under the compute roof; sizes near "
                   f"{ridge:.3g} FLOP/B trace the corner between them.")
    return out


def mfu(result: dict) -> list[str]:
    achieved, peak, value = (num(result, "achieved_flops"), num(result, "peak_flops"),
                             num(result, "mfu"))
    if not achieved or not peak:
        return []
    name = name_of(result.get("peak_name") or "the peak", 60)
    out = [f"The model ran at {si(achieved, 'FLOP/s')} of {si(peak, 'FLOP/s')} ({name}): "
           f"MFU {percent(value if value is not None else achieved / peak)}."]
    step, tokens = num(result, "step_time_s", "median"), num(result, "tokens_per_step")
    losses = result.get("loss_first_last")
    if step and tokens:
        text = f"Each step took {seconds(step)} for {tokens:g} tokens"
        if isinstance(losses, list) and len(losses) == 2 and all(finite(x) is not None
                                                                   for x in losses):
            text += f"; the loss went {losses[0]:.3g} → {losses[1]:.3g}"
        out.append(text + ".")
    model = result.get("model") if isinstance(result.get("model"), dict) else {}
    hidden, seq = num(model, "hidden"), num(model, "seq_len")
    if hidden and seq and (value or achieved / peak) < 0.5:
        out.append(f"MFU rises with bigger matrix multiplies: at hidden {hidden:g} and "
                   f"seq_len {seq:g} per-operator overhead weighs; try hidden {4 * hidden:g}.")
    return out
