"""One strategy's entry in result.json, from every rank's report (rank 0 writes it):
step time, throughput and MFU; the bytes counted beside the bytes predicted; the memory
the allocator saw beside the formula, with its terms; the prediction with its residual -
what the model leaves unexplained, and the terms it knows it lacks."""

from __future__ import annotations

import statistics
from typing import Any

from jobs.lab import strategies
from jobs.lab.experiments import timing
from jobs.lab.strategies.base import TrainSpec


def counted_kinds(counts: dict) -> dict[str, dict[str, int]]:
    return {k: {"bytes": int(v["bytes"]), "count": int(v["count"])} for k, v in counts.items()}


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    k = (len(s) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def _comm(reports: list[dict], instrumented: bool) -> dict[str, Any]:
    """Bytes and calls per step, counted against predicted. A hand-written strategy's come
    from the counting wrapper over the timed steps (and the census must agree with it);
    PyTorch's own from the census of its untimed step (the dispatcher sees them all)."""
    rows, per_rank = [], []
    for r in reports:
        census = counted_kinds(r["census"]["collectives"])
        counted = counted_kinds(r["comm_per_step"]) if instrumented else census
        predicted = r["predicted_comm"] or {}
        for kind in sorted(set(predicted) | set(counted)):
            pred = predicted.get(kind, {"bytes": 0, "count": 0})
            got = counted.get(kind, {"bytes": 0, "count": 0})
            calls_ok = pred.get("count") is None or pred["count"] == got["count"]
            rows.append({"rank": r["rank"], "kind": kind, "predicted_bytes": pred["bytes"],
                         "predicted_calls": pred.get("count"), "counted_bytes": got["bytes"],
                         "counted_calls": got["count"],
                         "exact": got["bytes"] == pred["bytes"] and calls_ok})
        per_rank.append({"rank": r["rank"], "per_step": r["comm_per_step"] if instrumented
                         else census,
                         "constant_across_steps": r["comm_constant_across_steps"]
                         if instrumented else None,
                         "census_agrees": census == r["census_wrapper"] if instrumented
                         else None})
    return {"instrumented": instrumented,
            "source": "counting wrapper, timed steps" if instrumented else
                      "dispatcher census (torch.distributed's c10d operators), untimed step",
            "per_rank": per_rank, "bytes_vs_predicted": rows,
            "all_exact": all(c["exact"] for c in rows) if rows else None}


def _memory(r: dict) -> dict[str, Any]:
    """`measured`/`predicted`/`ratio`: the model state the strategy lists against its
    formula (as before: a tautology when the strategy is right); `peak`: what was alive at
    the step's peak - live storage on CPU, the allocator on CUDA, independent of any
    formula - against the peak formula, with its terms."""
    formula, alive = r["predicted_memory"], r["allocator"]
    state, predicted = r["model_state_bytes"], formula["model_state"]
    return {"rank": r["rank"], "measured": state,
            "predicted": {k: predicted[k] for k in ("params", "grads", "optimizer", "total")},
            "ratio": state["total"] / predicted["total"] if predicted["total"] else None,
            "peak": {"measured": alive["peak"], "step_start": alive["step_start"],
                     "source": alive["source"], "predicted": formula["total"],
                     "ratio": alive["peak"] / formula["total"]
                     if alive["peak"] and formula["total"] else None,
                     "formula": {k: formula[k] for k in ("held", "transient", "peak_at",
                                                         "moments")}},
            "saved_activation_peak_bytes": r["saved_activation_peak_bytes"],
            "predicted_activation_bytes": formula["activations"],
            "cuda_max_memory_allocated": r["cuda_max_memory_allocated"],
            "cuda_allocated_before_build": r["cuda_allocated_before_build"]}


COMPUTE = ("gemm", "attention", "op_overhead", "memory_traffic")


def off_term(step: float, prediction: dict, comm: dict,
             phases: dict[str, tuple[float, float]] | None = None) -> dict[str, Any] | None:
    """Outside 1.5x: which side of the prediction was off - the communication (what the
    counting wrapper timed on the slowest rank, against the priced collectives) or the
    rest of the step (compute, and a pipeline's bubble). PyTorch's own collectives are
    counted, not timed: then compute and communication cannot be told apart, and the
    result names instead the phase of the step (forward, backward, optimizer, schedule:
    `phases`, the slowest rank's measured seconds per timed step against its priced
    compute) that missed by the most."""
    pred = prediction["step_time_s"]
    if not pred or 1 / 1.5 <= step / pred <= 1.5:
        return None
    terms = prediction["terms_s"]
    pred_comm = sum(v for k, v in terms.items() if k == "comm" or k.endswith("_comm"))
    if not comm["instrumented"]:
        if phases:
            phase, (measured, predicted) = max(phases.items(),
                                               key=lambda kv: abs(kv[1][0] - kv[1][1]))
            return {"term": phase, "measured_s": measured, "predicted_s": predicted,
                    "why": f"{phase}: {measured * 1e3:.3g} ms measured against "
                           f"{predicted * 1e3:.3g} ms of priced compute (PyTorch's own "
                           "collectives run inside it, counted, not timed)"}
        return {"term": None, "measured_s": step, "predicted_s": pred,
                "why": "PyTorch's own collectives are counted, not timed: compute and "
                       "communication cannot be told apart"}
    meas_comm = max((sum(v.get("time_s", 0.0) for v in r["per_step"].values())
                     for r in comm["per_rank"]), default=0.0)
    sides = {"communication": (meas_comm, pred_comm),
             "compute": (step - meas_comm, pred - pred_comm)}
    if "bubble" in terms or meas_comm >= step:
        # a pipeline's receives wait out its neighbour (the bubble) and its sends run
        # beside compute; an async collective's time runs from launch to wait: the
        # compute spans (forward, backward, optimizer) against their priced compute, the
        # rest of the step against the rest of the prediction
        if not phases:
            return {"term": None, "measured_s": step, "predicted_s": pred,
                    "why": "its timed collectives overlap compute and waits, so compute "
                           "and communication cannot be told apart"}
        spans = sum(m for m, _ in phases.values())
        priced = sum(p for _, p in phases.values())
        rest = "communication and bubble" if "bubble" in terms else "communication"
        sides = {"compute": (spans, priced), rest: (step - spans, pred - priced)}
    term, (measured, predicted) = max(sides.items(), key=lambda kv: abs(kv[1][0] - kv[1][1]))
    return {"term": term, "measured_s": measured, "predicted_s": predicted,
            "why": f"{term}: {measured * 1e3:.3g} ms measured against {predicted * 1e3:.3g} "
                   "ms predicted"}


def _phases(report: dict, extra: dict | None = None) -> dict[str, tuple[float, float]]:
    """{phase: (measured seconds per timed step, priced compute)} of one rank, for the
    phases both the timeline and the census know (forward, backward, optimizer ...);
    `extra`: seconds the strategy's prediction adds to a phase's compute (a split
    backward's second pass), so a phase is judged against what was predicted for it."""
    extra = extra or {}
    measured = dict(report.get("phases_per_step") or {})
    if "schedule" in measured:  # torch's schedules: the stage's spans run inside its own
        measured["schedule"] = max(0.0, measured["schedule"] - measured.get("forward", 0.0)
                                   - measured.get("backward", 0.0))
    return {ph: (measured[ph], sum(terms.values()) + extra.get(ph, 0.0))
            for ph, terms in report["compute"].items() if ph in measured and ph != "step"}


def per_step(reports: list[dict]) -> list[dict[str, Any]]:
    """Each timed step: its time on the slowest rank, and the global loss (the ranks'
    weighted shares summed, as the correctness gate sums them)."""
    act = [r for r in reports if r["active"]]
    steps = min(len(r["step_times_s"]) for r in act) if act else 0
    return [{"step": i, "time_s": max(r["step_times_s"][i] for r in act),
             "loss": sum(r["loss_shares"][i] for r in reports if len(r["loss_shares"]) > i)}
            for i in range(steps)]


def summarise(entry: dict, reports: list[dict], prediction: dict, spec: TrainSpec, cal,
              is_cuda: bool) -> dict:
    act = [r for r in reports if r["active"]]
    medians = [statistics.median(r["step_times_s"]) for r in act]
    slowest = max(act, key=lambda r: statistics.median(r["step_times_s"]))
    step = max(medians)
    cls = strategies.get(entry["strategy"])
    flops_step = spec.flops()
    mem = [_memory(r) for r in act]
    residual = step - prediction["step_time_s"]
    # gloo's threads taking cores from compute are priced where the kernel counted each
    # rank's share of a core (cpu_share_per_rank); elsewhere they are not
    shared = is_cuda or not prediction["terms_s"].get("comm") \
        or bool(prediction.get("cpu_share_per_rank"))
    unmodelled = list(cls.unmodelled) + ([] if shared
                                         else ["gloo's threads taking cores from compute"])
    steps = per_step(reports)
    spread = timing.spread([st["time_s"] for st in steps])
    for i in spread["outliers"]:
        steps[i]["outlier"] = True
    mfu = flops_step / step / (cal.peak_flops * len(act))
    # no rank's step can be shorter than its own GEMMs: if it is, the probes were slowed
    gemm_floor = max(sum(ph["gemm"] for ph in r["compute"].values()) for r in act)
    problems = timing.validity(mfu, step, gemm_floor, cal.peak_samples)
    entry.update({
        "ranks": len(act),
        "step_time_s": {"median": step, "p10": _pct(slowest["step_times_s"], 0.1),
                        "p90": _pct(slowest["step_times_s"], 0.9),
                        "per_rank_median": medians,
                        **{k: spread[k] for k in ("n", "q1", "q3", "iqr_fraction",
                                                  "outliers")},
                        "stopped": act[0].get("timing_stopped"),
                        "spread_target": timing.SPREAD_TARGET},
        "per_step": steps,
        "tokens_per_s": spec.tokens / step,
        "mfu": {"value": mfu, "valid": mfu <= 1.0,
                "flops_per_step": flops_step, "peak_flops_per_rank": cal.peak_flops,
                "peak_name": cal.peak_name, "dtype": spec.cfg.dtype,
                "basis": "fraction of " + cal.peak_name},
        "gemm_floor_s": gemm_floor,
        "invalid": problems,
        "comm": (comm := _comm(act, bool(cls.instrumented))),
        "memory": mem,
        "compute_per_rank": [{"rank": r["rank"], "phases": r["compute"]} for r in act],
        "timeline": [{"rank": r["rank"], "by_kind": r["timeline"]} for r in act],
        "extra": [{"rank": r["rank"], **r["extra"]} for r in act if r["extra"]],
        "prediction": {**prediction, "residual_s": residual,
                       "residual_fraction": residual / step if step else None,
                       "unmodelled": unmodelled,
                       "off": off_term(step, prediction, comm, _phases(
                           slowest, (prediction.get("phase_extra_s") or {}).get(
                               str(slowest["rank"]))))},
        "ratios": {"step_time": step / prediction["step_time_s"],
                   "memory": max((m["ratio"] for m in mem if m["ratio"]), default=None),
                   "memory_peak": max((m["peak"]["ratio"] for m in mem if m["peak"]["ratio"]),
                                      default=None)},
        "dominant_term": prediction["dominant"],
    })
    idles = [r["idle_fraction"] for r in act if r["idle_fraction"] is not None]
    if "bubble_fraction" in prediction:
        measured = statistics.mean(idles) if idles else None
        entry["bubble"] = {"measured_idle_fraction": measured,
                           "per_rank": idles,
                           "predicted": prediction["bubble_fraction"],
                           "predicted_per_rank": prediction.get("predicted_idle_per_stage"),
                           "ratio": measured / prediction["bubble_fraction"]
                           if measured is not None and prediction["bubble_fraction"] else None}
    return entry
