"""The loop shared by the training experiments (data_parallel, pipeline,
tensor_parallel, zero): for each strategy, gate it against the single-device
reference, then - only if it passed - time it, measure its memory, and set the
cost model's prediction beside the measurement."""

from __future__ import annotations

import statistics
from typing import Any

import torch
import torch.distributed as dist

from jobs.lab import costmodel, strategies
from jobs.lab.correctness import gate, reference_step
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


def prepare(ctx: Context, name: str, spec: TrainSpec, batch, ref, progress) -> dict[str, Any]:
    """Build the strategy and put it through the correctness gate."""
    tl = ctx.timeline
    tl.tags = {"strategy": name, "step": "gate"}
    strat: Strategy = strategies.get(name)(ctx, spec)
    ctx.comm.reset()
    verdict = gate(ctx, strat, batch, ref)
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
    dist.barrier()
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


def finish(ctx: Context, state: dict, spec: TrainSpec, batch, cal, params: dict) -> dict:
    """Memory step, per-rank reports gathered, and (on rank 0) the strategy's entry."""
    tl, name, strat = ctx.timeline, state["name"], state["strategy"]
    verdict, active = state["verdict"], state["active"]
    entry: dict[str, Any] = {"strategy": name, "label": strat.label, "builtin": strat.builtin,
                             "correctness": verdict}
    if not verdict["passed"]:
        return entry
    steps, times, comm_steps = params["steps"], state["times"], state["comm_steps"]
    gate_comm = state["gate_comm"]

    # one more, untimed step under the saved-activation meter
    tl.tags = {"strategy": name, "step": "memory"}
    if ctx.is_cuda:
        torch.cuda.reset_peak_memory_stats(ctx.device)
    dist.barrier()
    meter = SavedActivations(strat.parameters() if active else [])
    if active:
        with meter:
            strat.train_step(batch)
    ctx.comm.reset()
    cuda_peak = torch.cuda.max_memory_allocated(ctx.device) if ctx.is_cuda else None

    def kinds(counts: dict) -> dict:
        return {k: {"bytes": int(v["bytes"]), "count": int(v["count"])}
                for k, v in counts.items()}

    report = {
        "rank": ctx.rank,
        "active": active,
        "step_times_s": times,
        "comm_per_step": {k: {**kinds(comm_steps[-1]).get(k, {}),
                              "time_s": statistics.median(c.get(k, {}).get("time_s", 0.0)
                                                          for c in comm_steps)}
                          for k in (comm_steps[-1] if comm_steps else {})},
        "comm_constant_across_steps": all(kinds(c) == kinds(comm_steps[0]) for c in comm_steps),
        "comm_gate_step": kinds(gate_comm),
        "predicted_comm": strat.predicted_comm() if active else None,
        "model_state_bytes": strat.model_state() if active else None,
        "predicted_model_state_bytes": strat.predicted_memory() if active else None,
        "saved_activation_peak_bytes": meter.peak if active else None,
        "cuda_max_memory_allocated": cuda_peak,
        "idle_fraction": _idle_fraction(ctx, name, range(steps)) if active else None,
        "timeline": {k: v for k, v in tl.summary(strategy=name).items()},
        "extra": strat.extra() if active else {},
    }
    reports = ctx.gather(report)
    prediction = strat.predict(cal) if ctx.rank == 0 else None
    if ctx.rank != 0:
        return entry
    return _summarise(entry, reports, prediction, spec, cal, ctx)


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
            "cuda_max_memory_allocated": r["cuda_max_memory_allocated"]} for r in act]
    peak = cal.peak_flops * world_used
    entry.update({
        "ranks": world_used,
        "step_time_s": {"median": step, "p10": _pct(slowest["step_times_s"], 0.1),
                        "p90": _pct(slowest["step_times_s"], 0.9),
                        "per_rank_median": medians},
        "tokens_per_s": spec.tokens / step,
        "mfu": {"value": flops_step / step / peak, "flops_per_step": flops_step,
                "peak_flops_per_rank": cal.peak_flops,
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
    batch = make_batch(spec.cfg, spec.batch_size)
    ref = reference_step(spec.cfg, batch, ctx.device)
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

    states = [prepare(ctx, n, spec, batch, ref, progress) for n in names]
    timed = [st for st in states if st["verdict"]["passed"]]
    counter[0] += (len(states) - len(timed)) * (warmup + steps)
    # round-robin: step i of every strategy before step i+1 of any, so that a noisy
    # machine slows all of them alike and their ratios stay meaningful
    for i in range(warmup + steps):
        for st in timed:
            time_step(ctx, st, i, warmup, spec, batch, progress)
    entries = [finish(ctx, st, spec, batch, cal, params) for st in states]
    c = spec.cfg
    return {
        "model": {**c.as_dict(), "params": c.param_count(),
                  "flops_per_token": costmodel.flops_per_token(c.kind, c.layers, c.hidden,
                                                               c.seq_len, c.vocab)},
        "tokens_per_step": spec.tokens,
        "calibration": cal.as_dict(),
        "strategies": entries,
        "failed": [e["strategy"] for e in entries if not e["correctness"]["passed"]],
    }
