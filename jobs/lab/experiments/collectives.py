"""Collective micro-benchmark, nccl-tests style: time per op and size, algbw = S/t,
busbw = algbw * factor(op, n); then a fit t = alpha + factor*S/W per op, and the
fitted model's prediction beside each measurement. Optionally, the overhead of
the counting wrapper on a raw all_reduce loop (alternating op by op, so drift cancels)."""

from __future__ import annotations

import time
from typing import Any

from jobs.lab.components.context import Context
from jobs.lab.components.instrument import Comm, Timeline
from jobs.lab.experiments.links import collective, message_bytes
from jobs.lab.experiments.timers import slowest_median, time_fn
from jobs.lab.predict import calibration, cost


def sizes(lo: int, hi: int) -> list[int]:
    out, s = [], lo
    while s <= hi:
        out.append(s)
        s *= 2
    return out


def _pcts(times: list[float]) -> dict[str, float]:
    s = sorted(times)
    return {"p10": s[int(0.1 * (len(s) - 1))], "p90": s[int(0.9 * (len(s) - 1))]}


def wrapper_overhead(ctx: Context, nbytes: int, pairs: int = 200) -> dict:
    """Median time of one all_reduce, raw vs through Comm. The two alternate op by op
    (order flipped every pair) so that noise from the machine hits both alike."""
    fns = {"raw": collective(ctx, "all_reduce", nbytes),
           "wrapped": collective(ctx, "all_reduce", nbytes, comm=ctx.comm)}
    kept = len(ctx.timeline.events)
    for _ in range(5):
        fns["raw"](), fns["wrapped"]()
    times: dict[str, list[float]] = {"raw": [], "wrapped": []}
    for i in range(pairs):
        for name in ("raw", "wrapped") if i % 2 == 0 else ("wrapped", "raw"):
            ctx.barrier()
            t0 = time.perf_counter()
            fns[name]()
            ctx.sync()
            times[name].append(time.perf_counter() - t0)
    del ctx.timeline.events[kept:]  # the probe is not part of the experiment's timeline
    ctx.comm.reset()
    r, w = slowest_median(ctx, times["raw"]), slowest_median(ctx, times["wrapped"])
    # what the wrapper adds per call (count, marks, timeline event; on CUDA two events),
    # timed without the collective's noise around it
    scratch = Comm(Timeline(ctx.rank, device=ctx.device), ctx.group, ctx.device)
    n = 20000
    t0 = time.perf_counter()
    for _ in range(n):
        launched = scratch._launch("all_reduce", nbytes, {})
        scratch._time(*launched, scratch.timeline.mark())
    bookkeeping = (time.perf_counter() - t0) / n
    scratch.reset()  # (CUDA events are read after the loop, as after a step)
    return {"bytes": nbytes, "pairs": pairs, "raw_s": r, "wrapped_s": w, "overhead": w / r - 1,
            "bookkeeping_s": bookkeeping, "bookkeeping_fraction": bookkeeping / r}


def run(ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
    n = ctx.world
    table = []
    fits = {}
    ops = params["ops"]
    grid = sizes(params["min_bytes"], params["max_bytes"])
    total = len(ops) * len(grid)
    step = 0
    for op in ops:
        samples = []
        for S_req in grid:
            S = message_bytes(op, S_req, n)
            fn = collective(ctx, op, S)
            times = time_fn(ctx, fn, params["iters"], params["warmup"])
            t = slowest_median(ctx, times)
            algbw = S / t
            row = {"op": op, "bytes": S, "time_s": t, **_pcts(times), "algbw_Bps": algbw,
                   "busbw_Bps": algbw * cost.busbw_factor(op, n)}
            table.append(row)
            samples.append((S, t))
            step += 1
            ctx.progress(step, total, op=op, bytes=S, time_s=t,
                         busbw_GBps=row["busbw_Bps"] / 1e9)
        fit = calibration.fit_link(op, n, samples)
        fits[op] = {"alpha_s": fit.alpha, "busbw_Bps": fit.bandwidth,
                    "rms_rel_error": fit.rms_rel_error, "max_rel_error": fit.max_rel_error,
                    "fallback": fit.fallback,
                    "formula": "t = alpha + factor(op, n) * S / W"}
        for row in table:
            if row["op"] == op:
                row["predicted_s"] = fit.time(op, row["bytes"], n)
                row["measured_over_predicted"] = row["time_s"] / row["predicted_s"]
    out: dict[str, Any] = {"world_size": n, "table": table, "fits": fits,
                           "factors": {op: cost.busbw_factor(op, n) for op in ops}}
    if params["measure_overhead"]:
        out["wrapper_overhead"] = wrapper_overhead(ctx, params["min_bytes"])
        ctx.log(f"wrapper overhead on all_reduce of {params['min_bytes']} B: "
                f"{out['wrapper_overhead']['overhead'] * 100:+.2f}%")
    return out
