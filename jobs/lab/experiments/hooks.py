"""The strategy's own Python beyond its operators, probed on the strategy itself.

A PyTorch wrapper runs code of its own around the operators the census counts: FSDP2's
hooks (unshard before a unit's forward and backward - copy-in, the gather, copy-out,
its parameters made DTensors again -, reshard after, reduce-scatter scheduling after
its backward), DTensor's module hooks and redistributions (from_local, redistribute,
to_local, each an autograd Function), the torch._dynamo wrappers around them. The
per-operator overhead, probed on a plain model, does not see any of it, and neither does
DTensor's dispatch probe, one replicated operator on a 1-D mesh.

So the run builds the strategy again over a model of tiny widths and the same counts
(blocks, heads, tensor-parallel degree, micro-batches, batch: the census counts the same
operators, so the hooks run as often), times its steps phase by phase on the compute
clock (on CPU the thread's CPU time: its work, none of its waits for peers), and keeps,
per phase, what the phase took beyond the priced operators, per operator. The cost model
prices a step's `hooks` term from its census with it (calibration.Calibration.compute)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from jobs.lab import strategies
from jobs.lab.components.census import OpCensus
from jobs.lab.components.context import Context
from jobs.lab.components.instrument import Comm, Timeline
from jobs.lab.components.model import make_batch
from jobs.lab.experiments.probes import attention_times, gemm_time
from jobs.lab.experiments.timers import compute_clock, expected
from jobs.lab.predict.calibration import Calibration, operators
from jobs.lab.strategies.base import TrainSpec


class WorkTimeline(Timeline):
    """A timeline on the compute clock: its spans measure each phase's work. Host times
    only, on CUDA too (no events): a hook is the host's time."""

    def __init__(self, rank: int, clock: Callable[[], float]) -> None:
        super().__init__(rank, origin=0.0)
        self.clock = clock

    def now(self) -> float:
        return self.clock()


def tiny_spec(spec: TrainSpec) -> TrainSpec:
    """The run's spec with tiny widths and every count kept: the same blocks, heads,
    micro-batches and batch; the hidden size divisible by the heads and the
    tensor-parallel degree (a mesh's tp, else at most the world), the vocabulary by
    that degree."""
    c = spec.cfg
    t = spec.params.get("tp") or spec.params.get("world_size", 1)
    widths = {"hidden": 2 * c.heads * t, "seq_len": min(c.seq_len, 4), "vocab": 16 * t}
    return dataclasses.replace(spec, cfg=dataclasses.replace(c, **widths),
                               params={**spec.params, **widths})


def own_times(events: list[dict], total: float) -> dict[str, float]:
    """Seconds of each phase's own work in one step: a span less the spans inside it (the
    census gives an operator to the innermost open span), the rest of the step "step"."""
    out = {"step": total}
    for e in events:
        took = e["t1"] - e["t0"]
        out[e["kind"]] = out.get(e["kind"], 0.0) + took
        around = [o for o in events
                  if o is not e and o["t0"] <= e["t0"] and e["t1"] <= o["t1"]]
        parent = min(around, key=lambda o: o["t1"] - o["t0"])["kind"] if around else "step"
        out[parent] -= took
    return out


def price_shapes(ctx: Context, cal: Calibration, phases: dict) -> None:
    """Probe the GEMM and attention shapes of `phases` the calibration has not priced (the
    same keys on every rank, each the slowest rank's time)."""
    keys = ctx.gather(({k for ph in phases.values() for k in ph["gemm"]},
                       {(k[1], k[2]) for ph in phases.values() for k in ph["attention"]}))
    gemms = sorted(set().union(*(g for g, _ in keys)) - set(cal.gemm_s))
    attns = sorted(set().union(*(a for _, a in keys))
                   - {(k[1], k[2]) for k in cal.attention_s})
    ctx.barrier()
    mine = ([gemm_time(ctx, k) for k in gemms],
            [attention_times(ctx, shape, dt) for shape, dt in attns])
    every = ctx.gather(mine)
    cal.gemm_s.update({k: max(r[0][i] for r in every) for i, k in enumerate(gemms)})
    for i, (shape, dt) in enumerate(attns):
        for way in ("forward", "backward"):
            cal.attention_s[(way, shape, dt)] = max(r[1][i][way] for r in every)


def probe_wrappers(ctx: Context, cal: Calibration, names: list[str], spec: TrainSpec
                   ) -> dict[str, dict[str, float]]:
    """probe() for each of `names` that declares it (hook_probe): what a wrapper's own
    Python costs, on the wrapper itself."""
    return {name: probe(ctx, cal, name, spec) for name in names
            if strategies.get(name).hook_probe}


def probe(ctx: Context, cal: Calibration, name: str, spec: TrainSpec,
          iters: int = 8) -> dict[str, float]:
    """{phase: seconds per operator} of strategy `name`'s own Python beyond its priced
    operators, the slowest rank's: its steps over tiny_spec(spec), each phase on the
    compute clock, less what the calibration prices its census at (on CUDA only the
    host's part of that: the device runs the rest)."""
    tiny = tiny_spec(spec)
    clock = compute_clock(ctx)
    tl = WorkTimeline(ctx.rank, clock)
    strat = strategies.get(name)(dataclasses.replace(
        ctx, timeline=tl, comm=Comm(tl, ctx.group, ctx.device)), tiny)
    batch = make_batch(tiny.cfg, tiny.batch_size)
    for _ in range(2):  # lazy initialisation, DTensor's sharding caches
        strat.train_step(batch)
    census = OpCensus(tl.phase)
    with census:
        strat.train_step(batch)
    ctx.sync()
    phases = census.profile()["phases"]
    price_shapes(ctx, cal, phases)
    samples = []
    for _ in range(iters):
        tl.events.clear()
        t0 = clock()
        strat.train_step(batch)
        t1 = clock()  # the host's time: the device's is drained after, untimed
        ctx.sync()
        samples.append(own_times(tl.events, t1 - t0))
    del strat
    host = dataclasses.replace(cal, host_overlaps=False)
    rate = {}
    for ph, counts in phases.items():
        priced = host.compute({ph: counts})
        beyond = priced["op_overhead"] if cal.host_overlaps else sum(priced.values())
        took = expected([s.get(ph, 0.0) for s in samples])
        rate[ph] = max(0.0, took - beyond) / max(1, operators(counts))
    every = ctx.gather(rate)
    return {ph: max(r.get(ph, 0.0) for r in every) for ph in set().union(*every)}
