"""The loop shared by the training experiments (data_parallel, pipeline,
tensor_parallel, zero): for each strategy, gate it against the single-device
reference, then - only if it passed - time it, measure its memory, and set the
cost model's prediction beside the measurement.

Strategies are timed round-robin (all resident at once), but memory is measured on
each alone: every timed instance and the reference are freed first, then each
strategy is built again, takes one step (so its optimizer state exists) and is
measured over a second; on CUDA the allocator's peak is reset in between."""

from __future__ import annotations

import gc
import statistics
from typing import Any

import torch

from jobs.lab import costmodel, strategies
from jobs.lab.correctness import TOLERANCES, gate, gate_batches, reference_steps
from jobs.lab.experiments.probes import calibrate
from jobs.lab.instrument import SavedActivations
from jobs.lab.model import ModelConfig, make_batch
from jobs.lab.runtime import Context
from jobs.lab.strategies.base import Strategy, TrainSpec

CALIBRATE_OPS = {
    "data_parallel": ["all_reduce"],
    "tensor_parallel": ["all_reduce"],
    "pipeline": ["send_recv"],
    "zero": ["all_reduce", "reduce_scatter", "all_gather"],
}


def spec_from(params: dict[str, Any]) -> TrainSpec:
    cfg = ModelConfig(kind=params.get("model", "gpt"), layers=params["layers"],
                      hidden=params["hidden"], heads=params["heads"],
                      seq_len=params["seq_len"], vocab=params["vocab"], seed=params["seed"])
    return TrainSpec(cfg, params["batch_size"], params.get("micro_batches", 1),
                     params.get("bucket_cap_mb", 0.25))


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    k = (len(s) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def _idle_fraction(ctx: Context, name: str, steps: range) -> float | None:
    """1 - (forward+backward time)/(step time) on this rank, median over timed steps."""
    fractions = []
    for i in steps:
        evs = [e for e in ctx.timeline.events if e.get("strategy") == name and
               e.get("step") == i]
        step = [e for e in evs if e["kind"] == "step"]
        busy = sum(e["t1"] - e["t0"] for e in evs if e["kind"] in ("forward", "backward"))
        if not step or busy == 0:
            return None
        fractions.append(1 - busy / (step[0]["t1"] - step[0]["t0"]))
    return statistics.median(fractions) if fractions else None


def prepare(ctx: Context, name: str, spec: TrainSpec, batches, ref, tol,
            progress) -> dict[str, Any]:
    """Build the strategy and put it through the correctness gate."""
    tl = ctx.timeline
    tl.tags = {"strategy": name, "step": "gate"}
    strat: Strategy = strategies.get(name)(ctx, spec)
    ctx.comm.reset()
    verdict = gate(ctx, strat, batches, ref, tol)
    gate_comm = ctx.comm.reset()
    progress(strategy=name, phase="gate", passed=str(verdict["passed"]).lower())
    if not verdict["passed"]:
        ctx.log(f"{name}: correctness gate FAILED, not timed: {verdict['reason']}")
    return {"name": name, "strategy": strat, "verdict": verdict, "gate_comm": gate_comm,
            "active": strat.ranks_active == "all" or ctx.rank == 0,
            "times": [], "comm_steps": []}


def time_step(ctx: Context, state: dict, i: int, warmup: int, spec: TrainSpec, batch,
              progress) -> None:
    """One fenced, synchronized step; warm-up steps (i < warmup) are not kept."""
    tl, name = ctx.timeline, state["name"]
    tl.tags = {"strategy": name, "step": i - warmup}  # warm-up steps are negative
    ctx.barrier()
    ctx.sync()
    t0 = tl.now()
    if state["active"]:
        state["strategy"].train_step(batch)
    ctx.sync()
    t1 = tl.now()
    tl.add("step", t0, t1)
    counted = ctx.comm.reset()
    if i >= warmup:
        state["times"].append(t1 - t0)
        state["comm_steps"].append(counted)
    progress(strategy=name, phase="timed" if i >= warmup else "warmup",
             step_time_s=t1 - t0 if state["active"] else None,
             tokens_per_s=spec.tokens / (t1 - t0) if state["active"] else None)


def timed_report(ctx: Context, state: dict, cal: costmodel.Calibration, params: dict) -> None:
    """What this rank measured while timing, and what the cost model says (asked while
    the instance still exists)."""
    tl, name, strat = ctx.timeline, state["name"], state["strategy"]
    times, comm_steps, active = state["times"], state["comm_steps"], state["active"]

    def kinds(counts: dict) -> dict:
        return {k: {"bytes": int(v["bytes"]), "count": int(v["count"])}
                for k, v in counts.items()}

    state["report"] = {
        "rank": ctx.rank,
        "active": active,
        "step_times_s": times,
        "comm_per_step": {k: {**kinds(comm_steps[-1]).get(k, {}),
                              "time_s": statistics.median(c.get(k, {}).get("time_s", 0.0)
                                                          for c in comm_steps)}
                          for k in (comm_steps[-1] if comm_steps else {})},
        "comm_constant_across_steps": all(kinds(c) == kinds(comm_steps[0]) for c in comm_steps),
        "comm_gate_steps": kinds(state["gate_comm"]),
        "predicted_comm": strat.predicted_comm() if active else None,
        "predicted_model_state_bytes": strat.predicted_memory() if active else None,
        "idle_fraction": _idle_fraction(ctx, name, range(params["steps"])) if active else None,
        "timeline": {k: v for k, v in tl.summary(strategy=name).items()},
    }
    state["prediction"] = strat.predict(cal) if ctx.rank == 0 else None


def release(ctx: Context) -> None:
    """Free what nothing refers to any more, and hand it back to the device."""
    gc.collect()
    if ctx.is_cuda:
        torch.cuda.synchronize(ctx.device)
        torch.cuda.empty_cache()


def memory_report(ctx: Context, name: str, spec: TrainSpec, batch) -> dict:
    """The strategy alone on the device: built again, one step for its optimizer state,
    then one step under the saved-activation meter with the allocator's peak reset."""
    tl = ctx.timeline
    tl.tags = {"strategy": name, "step": "memory"}
    baseline = torch.cuda.memory_allocated(ctx.device) if ctx.is_cuda else None
    strat: Strategy = strategies.get(name)(ctx, spec)
    active = strat.ranks_active == "all" or ctx.rank == 0
    if active:
        strat.train_step(batch)
    ctx.sync()
    if ctx.is_cuda:
        torch.cuda.reset_peak_memory_stats(ctx.device)
    ctx.barrier()
    meter = SavedActivations(strat.parameters() if active else [])
    if active:
        with meter:
            strat.train_step(batch)
    ctx.sync()
    ctx.comm.reset()
    report = {
        "model_state_bytes": strat.model_state() if active else None,
        "saved_activation_peak_bytes": meter.peak if active else None,
        "cuda_max_memory_allocated": torch.cuda.max_memory_allocated(ctx.device)
        if ctx.is_cuda else None,
        "cuda_allocated_before_build": baseline,
        "extra": strat.extra() if active else {},
    }
    del strat, meter
    release(ctx)
    return report


def finish(ctx: Context, state: dict, spec: TrainSpec, cal) -> dict:
    """Per-rank reports gathered, and (on rank 0) the strategy's entry."""
    name, verdict = state["name"], state["verdict"]
    cls = strategies.get(name)
    entry: dict[str, Any] = {"strategy": name, "label": cls.label, "builtin": cls.builtin,
                             "correctness": verdict}
    if not verdict["passed"]:
        return entry
    reports = ctx.gather(state["report"])
    if ctx.rank != 0:
        return entry
    return _summarise(entry, reports, state["prediction"], spec, cal, ctx)


def _summarise(entry: dict, reports: list[dict], prediction: dict, spec: TrainSpec,
               cal: costmodel.Calibration, ctx: Context) -> dict:
    act = [r for r in reports if r["active"]]
    medians = [statistics.median(r["step_times_s"]) for r in act]
    slowest = max(act, key=lambda r: statistics.median(r["step_times_s"]))
    step = max(medians)
    world_used = len(act)
    flops_step = spec.flops()
    instrumented = bool(strategies.get(entry["strategy"]).instrumented)
    comm_match = []
    for r in act:
        counted_kinds = set(r["comm_per_step"]) if instrumented else set()
        for kind in sorted(set(r["predicted_comm"] or {}) | counted_kinds):
            pred = (r["predicted_comm"] or {}).get(kind, {"bytes": 0, "count": 0})
            got = r["comm_per_step"].get(kind, {}) if instrumented else None
            comm_match.append({
                "rank": r["rank"], "kind": kind, "predicted_bytes": pred["bytes"],
                "predicted_calls": pred.get("count"),
                # PyTorch's own strategies issue collectives the wrapper cannot see
                "counted_bytes": got.get("bytes", 0) if got is not None else None,
                "counted_calls": got.get("count", 0) if got is not None else None,
                "exact": got.get("bytes", 0) == pred["bytes"] if got is not None else None,
            })
    mem = [{"rank": r["rank"], "measured": r["model_state_bytes"],
            "predicted": r["predicted_model_state_bytes"],
            "ratio": r["model_state_bytes"]["total"] / r["predicted_model_state_bytes"]["total"],
            "saved_activation_peak_bytes": r["saved_activation_peak_bytes"],
            "cuda_max_memory_allocated": r["cuda_max_memory_allocated"],
            "cuda_allocated_before_build": r["cuda_allocated_before_build"]} for r in act]
    peak = cal.peak_flops * world_used
    entry.update({
        "ranks": world_used,
        "step_time_s": {"median": step, "p10": _pct(slowest["step_times_s"], 0.1),
                        "p90": _pct(slowest["step_times_s"], 0.9),
                        "per_rank_median": medians},
        "tokens_per_s": spec.tokens / step,
        "mfu": {"value": flops_step / step / peak, "flops_per_step": flops_step,
                "peak_flops_per_rank": cal.peak_flops, "peak_name": cal.peak_name,
                "dtype": spec.cfg.dtype,
                "basis": "fraction of measured GEMM peak" if not ctx.is_cuda else
                         "fraction of measured fp32 GEMM peak"},
        "comm": {"instrumented": instrumented,
                 "per_rank": [{"rank": r["rank"], "per_step": r["comm_per_step"],
                               "constant_across_steps": r["comm_constant_across_steps"]}
                              for r in act],
                 "bytes_vs_predicted": comm_match,
                 "all_exact": all(c["exact"] for c in comm_match)
                 if comm_match and instrumented else None},
        "memory": mem,
        "timeline": [{"rank": r["rank"], "by_kind": r["timeline"]} for r in act],
        "extra": [{"rank": r["rank"], **r["extra"]} for r in act if r["extra"]],
        "prediction": prediction,
        "ratios": {"step_time": step / prediction["step_time_s"],
                   "memory": max(m["ratio"] for m in mem)},
        "dominant_term": prediction["dominant"],
    })
    idles = [r["idle_fraction"] for r in act if r["idle_fraction"] is not None]
    if "bubble_fraction" in prediction:
        measured = statistics.mean(idles) if idles else None
        entry["bubble"] = {"measured_idle_fraction": measured,
                           "per_rank": idles,
                           "predicted": prediction["bubble_fraction"],
                           "ratio": measured / prediction["bubble_fraction"]
                           if measured is not None and prediction["bubble_fraction"] else None}
    return entry


def run(ctx: Context, experiment: str, params: dict[str, Any]) -> dict[str, Any]:
    spec = spec_from(params)
    tol = TOLERANCES[params.get("gate_tolerance", "float32")]
    batch = make_batch(spec.cfg, spec.batch_size)
    batches = gate_batches(spec.cfg, spec.batch_size)
    ref = reference_steps(spec.cfg, batches, ctx.device)
    mb_tokens = spec.tokens // max(ctx.world, spec.micro_batches)
    cal = calibrate(ctx, CALIBRATE_OPS[experiment],
                    (max(mb_tokens, 1), spec.cfg.hidden, 4 * spec.cfg.hidden))
    ctx.log(f"calibrated: C={cal.flops / 1e9:.2f} GFLOP/s per rank, "
            + ", ".join(f"{op}: alpha={f.alpha * 1e3:.3f} ms W={f.bandwidth / 1e9:.3f} GB/s"
                        for op, f in cal.links.items()))
    names = params["strategies"]
    warmup, steps = params["warmup"], params["steps"]
    total = len(names) * (1 + warmup + steps)
    counter = [0]

    def progress(**fields: Any) -> None:
        counter[0] += 1
        ctx.progress(counter[0], total, **fields)

    states = [prepare(ctx, n, spec, batches, ref, tol, progress) for n in names]
    del ref, batches
    timed = [st for st in states if st["verdict"]["passed"]]
    counter[0] += (len(states) - len(timed)) * (warmup + steps)
    # round-robin: step i of every strategy before step i+1 of any, so that a noisy
    # machine slows all of them alike and their ratios stay meaningful
    for i in range(warmup + steps):
        for st in timed:
            time_step(ctx, st, i, warmup, spec, batch, progress)
    for st in timed:
        timed_report(ctx, st, cal, params)
    for st in states:
        st["strategy"] = None  # memory is measured on each strategy alone, below
    release(ctx)
    for st in timed:
        st["report"].update(memory_report(ctx, st["name"], spec, batch))
    entries = [finish(ctx, st, spec, cal) for st in states]
    c = spec.cfg
    return {
        "model": {**c.as_dict(), "params": c.param_count(),
                  "flops_per_token": c.flops_per_token()},
        "tokens_per_step": spec.tokens,
        "calibration": cal.as_dict(),
        "strategies": entries,
        "failed": [e["strategy"] for e in entries if not e["correctness"]["passed"]],
    }
