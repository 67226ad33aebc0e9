"""The loop shared by the training experiments (data_parallel, pipeline,
tensor_parallel, zero), for every strategy:

1. the gate against the single-device reference; only a strategy that passed goes on;
2. one untimed step under the census (jobs/lab/components/census.py): the operators and shapes it
   runs, the collectives it issues - PyTorch's own strategies' too;
3. the calibration, for exactly those shapes and messages (probes.calibrate);
4. timed steps, round-robin over the strategies (all resident at once);
5. the prediction (the census priced by the calibration, composed by the strategy);
6. memory, each strategy alone: the timed instances and the reference are freed, the
   strategy is built again, takes one step (its optimizer state exists) and a second,
   measured one - the allocator's records on CPU, max_memory_allocated on CUDA (the
   peak reset in between) - beside its formula.
"""

from __future__ import annotations

import contextlib
import gc
import statistics
import time
from typing import Any

import torch

from jobs.lab import strategies
from jobs.lab.components.census import LiveStorage, OpCensus, freeze_startup
from jobs.lab.components.context import Context
from jobs.lab.components.instrument import SavedActivations
from jobs.lab.components.model import ModelConfig, make_batch
from jobs.lab.experiments import hooks, timing
from jobs.lab.experiments.links import LinkDrift
from jobs.lab.experiments.probes import calibrate, concurrency, peak_sample, segments_of
from jobs.lab.experiments.recompute_versus import add_versus_single
from jobs.lab.experiments.summary import counted_kinds, summarise
from jobs.lab.experiments.timers import cpu_share, sched
from jobs.lab.predict.calibration import link_key
from jobs.lab.predict.memory import RECIPES
from jobs.lab.strategies.base import Strategy, TrainSpec
from jobs.lab.strategies.correctness import TOLERANCES, gate, gate_batches, reference_steps


def spec_from(params: dict[str, Any]) -> TrainSpec:
    precision = params.get("precision", "fp32_sgd")
    cfg = ModelConfig(kind=params.get("model", "gpt"), layers=params["layers"],
                      hidden=params["hidden"], heads=params["heads"],
                      seq_len=params["seq_len"], vocab=params["vocab"], seed=params["seed"],
                      dtype=RECIPES[precision]["dtype"],
                      # a mixture-of-experts GPT (the experts experiment); 0: dense
                      experts=params.get("experts", 0), top_k=params.get("top_k", 1),
                      capacity_factor=params.get("capacity_factor", 1.0))
    return TrainSpec(cfg, params["batch_size"], params.get("micro_batches", 1),
                     params.get("bucket_cap_mb", 0.25), precision, params=dict(params))


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
    progress(strategy=name, phase="gate", counted=False)
    strat: Strategy = strategies.get(name)(ctx, spec)
    ctx.comm.reset()
    verdict = gate(ctx, strat, batches, ref, tol)
    gate_comm = ctx.comm.reset()
    progress(strategy=name, phase="gate", passed=str(verdict["passed"]).lower())
    if not verdict["passed"]:
        ctx.log(f"{name}: correctness gate FAILED, not timed: {verdict['reason']}")
    return {"name": name, "strategy": strat, "verdict": verdict, "gate_comm": gate_comm,
            "active": strat.ranks_active == "all" or ctx.rank == 0,
            "times": [], "comm_steps": [], "loss_shares": []}


def census_step(ctx: Context, state: dict, batch) -> None:
    """One untimed step under the census; the wrapper counts the same step."""
    tl = ctx.timeline
    tl.tags = {"strategy": state["name"], "step": "census"}
    census = OpCensus(tl.phase)
    ctx.barrier()
    if state["active"]:
        with census:
            state["strategy"].train_step(batch)
    ctx.sync()
    state["census"] = census.profile()
    state["census_wrapper"] = counted_kinds(ctx.comm.reset())


def needs_of(ctx: Context, states: list[dict]) -> dict:
    """What the calibration must measure for these strategies, the same on every rank."""
    mine: dict[str, Any] = {"links": {}, "gemm": set(), "attention": set(), "ops": 0,
                            "bytes": 0, "dtensor": False, "segments": {}}
    for st in states:
        census = st["census"]
        for phase in census["phases"].values():
            mine["gemm"] |= set(phase["gemm"])
            mine["attention"] |= set(phase["attention"])
            mine["ops"] += phase["ops"]
            mine["bytes"] += phase["bytes"]
            mine["dtensor"] |= phase["dtensor_ops"] > 0
        for kind, c in census["collectives"].items():
            op = "send_recv" if kind in ("send", "recv") else kind
            for n, largest in c.get("largest_by_size", {0: c["largest"]}).items():
                # a subgroup's collective gets its own link; the world's and p2p the world's
                key = link_key(op, n, ctx.world)
                mine["links"][key] = max(mine["links"].get(key, 0), largest)
        for key, row in segments_of(census, ctx.world).items():
            mine["segments"].setdefault(key, []).append(row)
    every = ctx.gather(mine)
    links: dict[str, int] = {}
    for r in every:
        for op, largest in r["links"].items():
            links[op] = max(links.get(op, 0), largest)
    segments: dict[str, list] = {}
    for r in every:
        for key, rows in r["segments"].items():
            segments.setdefault(key, []).extend(rows)
    return {"links": links, "segments": segments,
            "gemm": set().union(*(r["gemm"] for r in every)),
            "attention": set().union(*(r["attention"] for r in every)),
            "dtensor": any(r["dtensor"] for r in every),
            "op_bytes": sum(r["bytes"] for r in every) / max(1, sum(r["ops"] for r in every))}


def time_step(ctx: Context, state: dict, i: int, warmup: int, spec: TrainSpec, batch,
              progress) -> None:
    """One fenced, synchronized step; warm-up steps (i < warmup) are not kept."""
    tl, name = ctx.timeline, state["name"]
    tl.tags = {"strategy": name, "step": i - warmup}  # warm-up steps are negative
    ctx.barrier()
    ctx.sync()
    t0 = tl.now()
    tl.anchor()  # the device is idle: its clock meets the host's here
    before = sched()
    out = state["strategy"].train_step(batch) if state["active"] else None
    ctx.sync()
    after = sched()
    t1 = tl.now()
    tl.add("step", t0, t1)
    counted = ctx.comm.reset()  # also reads the step's CUDA events
    if i >= warmup:
        if before and after and not ctx.is_cuda:  # on CPU: the share of a core it got
            run, wait = state.setdefault("sched", [0.0, 0.0])
            state["sched"] = [run + after[0] - before[0], wait + after[1] - before[1]]
        state["times"].append(t1 - t0)
        state["comm_steps"].append(counted)
        # this rank's weighted share of the step's loss (read after the sync: no wait)
        state["loss_shares"].append(float(out.loss) * out.weight if out else 0.0)
    progress(strategy=name, phase="timed" if i >= warmup else "warmup",
             step_time_s=t1 - t0 if state["active"] else None,
             tokens_per_s=spec.tokens / (t1 - t0) if state["active"] else None)


def timing_rounds(ctx: Context, timed: list[dict], cal, overhead, warmup: int, steps: int,
                  dtype: str, step, ended, drift: LinkDrift | None = None) -> None:
    """Round-robin: step i of every strategy before step i+1 of any, so that a noisy
    machine slows all of them alike and their ratios stay meaningful; past the steps
    asked, only the strategies whose times have not settled go on (timing.verdict, on
    the slowest rank's times: every rank decides alike). A measured peak is probed again
    after every timed round, in the same conditions as the steps around it, and so is the
    per-operator overhead (`overhead`, probes.OverheadProbe), to record how far it moved
    while the steps ran. `ended` is told how many rounds a strategy took when it stops."""
    measured_peak = bool(cal.peak_samples)
    samples: list[float] = []
    op_samples: list[float] = []
    going, i, t0 = list(timed), 0, time.monotonic()
    while going:
        for st in going:
            step(st, i)
        if i >= warmup and measured_peak:
            samples.append(peak_sample(ctx, dtype))
        if i >= warmup:
            op_samples.append(overhead.sample(ctx))
            if drift:  # and the links, to record how far they moved (links.py)
                drift.sample(ctx)
        i += 1
        if i < warmup + steps:
            continue
        every = ctx.gather({"times": [st["times"] for st in going],
                            "elapsed": time.monotonic() - t0})
        elapsed = max(r["elapsed"] for r in every)
        still = []
        for k, st in enumerate(going):
            slowest = [max(r["times"][k][j] for r in every) for j in range(len(st["times"]))]
            st["stopped"] = timing.verdict(slowest, steps, elapsed)
            if st["stopped"] is None:
                still.append(st)
            else:
                ended(i)
        going = still
    # each round's figure is its slowest rank's (they probe at once, as they compute)
    rounds = ctx.gather((samples, op_samples))
    cal.add_peak_samples([min(r[0][j] for r in rounds) for j in range(len(samples))])
    cal.add_op_samples([max(r[1][j] for r in rounds) for j in range(len(op_samples))])
    cal.link_ratios = drift.ratios if drift else {}


def timed_report(ctx: Context, state: dict, cal, params: dict) -> None:
    """What this rank measured while timing, and what the cost model says (asked while
    the instance still exists): every rank prices its own census, rank 0 composes."""
    tl, name, strat = ctx.timeline, state["name"], state["strategy"]
    times, comm_steps, active = state["times"], state["comm_steps"], state["active"]
    # on CPU the census's compute is CPU time; it took 1/share as long where this rank's
    # thread got `share` of a core while it wanted one (the kernel's count, over the
    # timed steps: eight ranks on two cores get about a quarter each)
    share = cpu_share(*state["sched"]) if state.get("sched") else 1.0
    mine = {ph: cal.compute({ph: v}, share=share, hooks=cal.hooks.get(name))
            for ph, v in state["census"]["phases"].items()}
    compute = [c for c in ctx.gather(mine if active else None) if c is not None]
    shares = [x for x in ctx.gather(share if active else None) if x is not None]
    state["report"] = {
        "rank": ctx.rank,
        "active": active,
        "step_times_s": times,
        "loss_shares": state["loss_shares"],
        "comm_per_step": {k: {**counted_kinds(comm_steps[-1]).get(k, {}),
                              "time_s": statistics.median(c.get(k, {}).get("time_s", 0.0)
                                                          for c in comm_steps)}
                          for k in (comm_steps[-1] if comm_steps else {})},
        "comm_constant_across_steps": all(counted_kinds(c) == counted_kinds(comm_steps[0])
                                          for c in comm_steps),
        "comm_gate_steps": counted_kinds(state["gate_comm"]),
        "census": state["census"],
        "census_wrapper": state["census_wrapper"],
        "compute": mine,
        "cpu_share": share,
        "predicted_comm": strat.predicted_comm() if active else None,
        "idle_fraction": _idle_fraction(ctx, name, range(len(times))) if active else None,
        "timing_stopped": state.get("stopped"),
        "timeline": {k: v for k, v in tl.summary(strategy=name).items()},
        "phases_per_step": phase_times(tl, name, len(times)),
    }
    if ctx.rank == 0:  # its collectives priced by how it issues them: after compute or not
        priced = cal.for_census(state["census"]["collectives"])
        state["prediction"] = {**strat.predict(priced, compute),
                               "after_compute_share": priced.after_compute,
                               "cpu_share_per_rank": shares}
        # and as if every call came back to back (the price before calls after compute
        # had a link of their own): what that distinction moves
        state["prediction"]["back_to_back_s"] = strat.predict(cal, compute)["step_time_s"]
    else:
        state["prediction"] = None


def phase_times(tl, name: str, steps: int) -> dict[str, float]:
    """Seconds per timed step of each kind of span of a strategy (forward, backward,
    optimizer ...: all of a step's micro-batches summed), the median over its timed
    steps; the gate's, the census's and the warm-up's steps left out."""
    per: dict[str, list[float]] = {}
    for ev in tl.events:
        k = ev.get("step")
        if ev.get("strategy") == name and isinstance(k, int) and 0 <= k < steps:
            per.setdefault(ev["kind"], [0.0] * steps)[k] += ev["t1"] - ev["t0"]
    return {kind: statistics.median(v) for kind, v in per.items()}


def release(ctx: Context) -> None:
    """Free what nothing refers to any more, and hand it back to the device."""
    gc.collect()
    if ctx.is_cuda:
        torch.cuda.synchronize(ctx.device)
        torch.cuda.empty_cache()


def memory_report(ctx: Context, name: str, spec: TrainSpec, batch) -> dict:
    """The strategy alone on the device: built, one step for its optimizer state, then a
    measured step - on CPU every tensor storage followed from before the build on, on
    CUDA the caching allocator's peak, reset before the step - and under the
    saved-activation meter."""
    tl = ctx.timeline
    tl.tags = {"strategy": name, "step": "memory"}
    baseline = torch.cuda.memory_allocated(ctx.device) if ctx.is_cuda else 0
    alloc = LiveStorage()
    with alloc if not ctx.is_cuda else contextlib.nullcontext():
        strat: Strategy = strategies.get(name)(ctx, spec)
        active = strat.ranks_active == "all" or ctx.rank == 0
        if active:
            strat.train_step(batch)
        ctx.sync()
        if ctx.is_cuda:
            torch.cuda.reset_peak_memory_stats(ctx.device)
        ctx.barrier()
        meter = SavedActivations(strat.parameters() if active else [])
        alloc.mark()
        start = torch.cuda.memory_allocated(ctx.device) if ctx.is_cuda else None
        if active:
            with meter:
                strat.train_step(batch)
        ctx.sync()
    ctx.comm.reset()
    if ctx.is_cuda:
        peak = torch.cuda.max_memory_allocated(ctx.device) - baseline
        start = start - baseline
        source = "cuda caching allocator: max_memory_allocated, the strategy alone"
    else:
        peak, start = alloc.peak_bytes, alloc.start_bytes
        source = "live tensor storage (dispatch mode, weak references), from the build on"
    report = {
        "allocator": {"peak": peak, "step_start": start, "source": source},
        "model_state_bytes": strat.model_state() if active else None,
        "predicted_memory": strat.predicted_memory() if active else None,
        "saved_activation_peak_bytes": meter.peak if active else None,
        "cuda_max_memory_allocated": torch.cuda.max_memory_allocated(ctx.device)
        if ctx.is_cuda else None,
        "cuda_allocated_before_build": baseline if ctx.is_cuda else None,
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
    return summarise(entry, reports, state["prediction"], spec, cal, ctx.is_cuda)


def run(ctx: Context, experiment: str, params: dict[str, Any]) -> dict[str, Any]:
    # what the strategies import, imported before the freeze and so frozen with torch;
    # PyTorch's own import torch._dynamo as they build (DDP, torch.optim, checkpoint)
    classes = [strategies.get(name) for name in params["strategies"]]
    if any(cls.builtin for cls in classes):
        import torch._dynamo  # noqa: F401
    freeze_startup()
    spec = spec_from(params)
    # bf16 compute differs from the reference by bf16 rounding, whatever the device
    tol = TOLERANCES["bf16_compute" if spec.precision == "bf16_adamw"
                     else params.get("gate_tolerance", "float32")]
    batch = make_batch(spec.cfg, spec.batch_size)
    batches = gate_batches(spec.cfg, spec.batch_size)
    ref = reference_steps(spec.cfg, batches, ctx.device, spec.precision)
    names = params["strategies"]
    warmup, steps = params["warmup"], params["steps"]
    progress = timing.StepCount(ctx.progress, len(names), warmup, steps)
    states = [prepare(ctx, n, spec, batches, ref, tol, progress) for n in names]
    del ref, batches
    timed = [st for st in states if st["verdict"]["passed"]]
    for _ in range(len(states) - len(timed)):
        progress.ended(0)  # failed its gate: never timed
    progress(counted=False, phase="calibrating")
    for st in timed:
        census_step(ctx, st, batch)
    needs = {**needs_of(ctx, timed), "kind": spec.cfg.kind}
    cal, overhead = calibrate(ctx, needs, spec.cfg.dtype, spec.precision)
    cal.hooks.update(hooks.probe_wrappers(ctx, cal, [st["name"] for st in timed], spec))
    shared = concurrency(ctx) if ctx.world > 1 else None
    ctx.log(f"calibrated: {len(cal.gemm_s)} GEMM shapes, per-operator overhead "
            f"{cal.op_s * 1e6:.1f} us, copy {cal.bandwidth / 1e9:.1f} GB/s; "
            + ", ".join(f"{op}: alpha={f.alpha * 1e3:.3f} ms W={f.bandwidth / 1e9:.3f} GB/s "
                        f"(fit rms {f.rms_rel_error:.0%})" for op, f in cal.links.items()))
    timing_rounds(ctx, timed, cal, overhead, warmup, steps, spec.cfg.dtype,
                  lambda st, i: time_step(ctx, st, i, warmup, spec, batch, progress),
                  progress.ended, LinkDrift(ctx, cal, needs))
    for st in timed:
        timed_report(ctx, st, cal, params)
    for st in states:
        st["strategy"] = None  # memory is measured on each strategy alone, below
    release(ctx)
    progress(counted=False, phase="memory")
    for st in timed:
        st["report"].update(memory_report(ctx, st["name"], spec, batch))
    entries = [finish(ctx, st, spec, cal) for st in states]
    if experiment == "recompute" and ctx.rank == 0:
        add_versus_single(entries)  # memory saved, time added: beside single
    c = spec.cfg
    return {
        "model": {**c.as_dict(), "params": c.param_count(),
                  "flops_per_token": c.flops_per_token(), "precision": spec.precision},
        "tokens_per_step": spec.tokens,
        "calibration": {**cal.as_dict(), "concurrency": shared},
        "strategies": entries,
        "failed": [e["strategy"] for e in entries if not e["correctness"]["passed"]],
    }
