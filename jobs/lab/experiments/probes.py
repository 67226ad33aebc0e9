"""Timed probes shared by the benchmarks and by every experiment's calibration: a GEMM of
a given shape and layout, an attention kernel, a copy, and the per-operator overhead of a
small step (a collective of S bytes and the link sweeps: links.py; the timers:
timers.py). Medians over iterations, each iteration ended by a device synchronize
(collectives: also fenced by a barrier). On CPU a compute probe counts the thread's own
CPU time (timers.compute_clock): its work; the share of a core the steps got is taken
apart, where they ran. The collectives
run on the device's group (ctx.group); fences and timings travel as bookkeeping
(ctx.barrier, ctx.gather: CPU, gloo). Every rank probes at once, as every rank computes
at once in a step (on CPU they share the cores), and the slowest rank's figure is kept.

``calibrate`` measures what the cost model prices a step with - see cost.py - for
exactly the shapes and message sizes the run's strategies use (their census)."""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from jobs.lab.components.census import OpCensus
from jobs.lab.components.context import Context
from jobs.lab.components.model import ModelConfig, build_model, loss_fn, make_batch
from jobs.lab.components.optim import make_optimizer
from jobs.lab.experiments.links import link_sizes, subgroups, sweep_link
from jobs.lab.experiments.timers import compute_clock, device_times, expected, time_fn
from jobs.lab.predict import calibration
from jobs.lab.predict.memory import RECIPES

DENSE_BF16_PEAKS = {"H100": 989e12, "H200": 989e12, "A100": 312e12}


def gemm_flops(ctx: Context, M: int, N: int, K: int, dtype: torch.dtype = torch.float32,
               iters: int = 5, clock: Callable[[], float] = time.perf_counter,
               ) -> tuple[float, list[float]]:
    a = torch.randn(M, K, device=ctx.device, dtype=dtype)
    b = torch.randn(K, N, device=ctx.device, dtype=dtype)
    times = time_fn(ctx, lambda: torch.mm(a, b), iters, warmup=2, fence=False, clock=clock)
    return 2 * M * N * K / statistics.median(times), times


def copy_bandwidth(ctx: Context, nbytes: int = 64 << 20, iters: int = 5) -> float:
    """Read+write bytes per second of a device copy of nbytes."""
    src = torch.ones(max(1, nbytes // 4), device=ctx.device)
    dst = torch.empty_like(src)
    times = device_times(ctx, lambda: dst.copy_(src), iters, warmup=1)
    return 2 * src.numel() * 4 / statistics.median(times)


def peak_for(ctx: Context, dtype: str, given_tflops: float = 0.0) -> tuple[float, str]:
    """The MFU denominator: given; for bf16 on H100/H200/A100 the dense bf16 datasheet
    peak; otherwise the measured GEMM peak of the dtype."""
    if given_tflops > 0:
        return given_tflops * 1e12, "given"
    if ctx.is_cuda and dtype == "bfloat16":
        name = torch.cuda.get_device_name(ctx.device)
        for key, value in DENSE_BF16_PEAKS.items():
            if key in name:
                return value, f"{key} dense bf16 datasheet"
    return peak_sample(ctx, dtype), f"measured {PEAK_EDGE[ctx.is_cuda]}^3 {dtype} GEMM"


PEAK_EDGE = {True: 4096, False: 512}  # by is_cuda


def peak_sample(ctx: Context, dtype: str) -> float:
    """One try at the measured peak: a square GEMM's FLOP/s on this rank. The run takes
    several, between its timed steps, and keeps the best (see training.py). Timed by the
    clock the model's GEMMs are priced by (compute_clock: on CPU the thread's own time),
    so the tries and the GEMM rate that bounds the peak (calibrate) measure the same
    thing: a core's throughput, not the share of it a busy host left the probe."""
    edge = PEAK_EDGE[ctx.is_cuda]
    return gemm_flops(ctx, edge, edge, edge, dtype=getattr(torch, dtype), iters=3,
                      clock=compute_clock(ctx))[0]


def concurrency(ctx: Context, edge: int = 384, iters: int = 5,
                rounds: int = 3) -> dict[str, float]:
    """How much slower a rank computes when every rank computes at once than alone: 1.0
    when each has a core (or a device) of its own, up to the world size when they take
    turns on shared cores - then stages cannot overlap and a pipeline cannot beat naive
    model parallelism, whatever its schedule. Each rank times a GEMM alone (the others
    wait at a barrier), then all at once, `rounds` times in turn (other work on the host
    comes and goes); the median round's ratio, the slowest rank's, is kept."""
    a = torch.randn(edge, edge, device=ctx.device)
    ratios = []
    for _ in range(rounds):
        solo = []
        for r in range(ctx.world):
            ctx.barrier()
            if ctx.rank == r:
                solo = time_fn(ctx, lambda: torch.mm(a, a), iters, warmup=1, fence=False)
            ctx.barrier()
        together = time_fn(ctx, lambda: torch.mm(a, a), iters, warmup=1, fence=False)
        ratios.append(statistics.median(together) / statistics.median(solo))
    every = ctx.gather(statistics.median(ratios))
    return {"slowdown_all_at_once": max(every), "ranks": ctx.world}


def _matrix(ctx: Context, shape: tuple, layout: str, dtype: torch.dtype) -> torch.Tensor:
    """A random tensor of `shape`, row-major ('n') or the transpose of one ('t')."""
    if layout == "n":
        return torch.randn(shape, device=ctx.device, dtype=dtype)
    flipped = (*shape[:-2], shape[-1], shape[-2])
    return torch.randn(flipped, device=ctx.device, dtype=dtype).transpose(-1, -2)


def gemm_time(ctx: Context, key: tuple, iters: int = 7) -> float:
    """Seconds of one call of the census's matrix multiply `key` (census.gemm_key):
    expected, as a step that makes many of them pays."""
    op, a_shape, a_layout, b_shape, b_layout, dtype = key
    dt = getattr(torch, dtype)
    a, b = _matrix(ctx, a_shape, a_layout, dt), _matrix(ctx, b_shape, b_layout, dt)
    bias = torch.zeros(b_shape[-1], device=ctx.device, dtype=dt)
    fn = {"mm": lambda: torch.mm(a, b), "bmm": lambda: torch.bmm(a, b),
          "addmm": lambda: torch.addmm(bias, a, b),
          "baddbmm": lambda: torch.baddbmm(bias, a, b)}[op]
    return expected(device_times(ctx, fn, iters, warmup=2))


def attention_times(ctx: Context, shape: tuple, dtype: str, iters: int = 5) -> dict[str, float]:
    """Seconds of causal SDPA's forward, and of its backward, at q's shape (B, a, T, hd)."""
    q, k, v = (torch.randn(shape, device=ctx.device, dtype=getattr(torch, dtype),
                           requires_grad=True) for _ in range(3))

    def forward() -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    out = forward()
    grad = torch.ones_like(out)
    t_f = expected(device_times(ctx, forward, iters, warmup=2))
    t_fb = expected(device_times(ctx, lambda: forward().backward(grad), iters, warmup=2))
    return {"forward": t_f, "backward": max(t_fb - t_f, 0.0)}


class OverheadProbe:
    """The tiny step again, between timed rounds: the per-operator overhead is most of a
    small CPU step, and a shared host's load moves it while the steps run (training.py
    records every round's beside the calibration's, which prices)."""

    def __init__(self, step: Callable[[], None], priced_s: float, ops: int) -> None:
        self.step, self.priced_s, self.ops = step, priced_s, max(1, ops)

    def sample(self, ctx: Context, iters: int = 5) -> float:
        t = expected(time_fn(ctx, self.step, iters, warmup=1, fence=False,
                             clock=compute_clock(ctx)))
        return max(t - self.priced_s, 0.0) / self.ops


def tiny_step(ctx: Context, kind: str, precision: str) -> tuple[Callable[[], None], dict]:
    """A step of a very small model of the run's kind and recipe - its operators cost
    their overhead, not their arithmetic - and its census."""
    cfg = ModelConfig(kind=kind, layers=2, hidden=8, heads=2, seq_len=4, vocab=16,
                      dtype=RECIPES[precision]["dtype"])
    model = build_model(cfg, ctx.device)
    opt = make_optimizer(list(model.parameters()), precision)
    batch = make_batch(cfg, 2).to(ctx.device)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        loss_fn(kind)(model(batch.inputs), batch.targets).backward()
        opt.step()

    step()  # the optimizer's state exists, as in the steps it stands for
    census = OpCensus()
    with census:
        step()
    return step, census.profile()["phases"]["step"]


def dtensor_overhead(ctx: Context, iters: int = 50) -> float:
    """What a DTensor-level operator costs beyond the local one it runs (asked only
    when a strategy uses DTensor, so DTensor is imported here, not with the module)."""
    from torch.distributed.tensor import Replicate, distribute_tensor

    local = torch.ones(8, device=ctx.device)
    dt = distribute_tensor(local.clone(), ctx.mesh(), [Replicate()])
    dt.mul_(1.0)  # sharding propagation cached, as in every step but the first
    clock = compute_clock(ctx)
    t_d = expected(time_fn(ctx, lambda: dt.mul_(1.0), iters, warmup=3, fence=False,
                           clock=clock))
    t_l = expected(time_fn(ctx, lambda: local.mul_(1.0), iters, warmup=3, fence=False,
                           clock=clock))
    return max(t_d - t_l, 0.0)


def calibrate(ctx: Context, needs: dict, dtype: str = "float32",
              precision: str = "fp32_sgd") -> tuple[calibration.Calibration, OverheadProbe]:
    """What this run's step times are priced with, measured for what its strategies run
    (``needs``: the same on every rank - links {op: largest message}, gemm and attention
    keys from the census, the model kind, whether DTensor is used, the mean bytes of an
    operator, the compute before the calls that come after compute: ``segment_seconds``):
    a link fit per collective (and, on CPU, one of its calls after that compute), a time
    per GEMM and attention shape, the per-operator overhead from a tiny step of the same
    kind of model (its measured time, less what its GEMMs, attention and bytes cost, per
    operator), and the copy bandwidth at the size of an operator's tensors."""
    tiny, tiny_phase = tiny_step(ctx, needs["kind"], precision)
    gemms = sorted(set(needs["gemm"]) | set(tiny_phase["gemm"]))
    attns = sorted({(k[1], k[2]) for k in set(needs["attention"]) | set(tiny_phase["attention"])})
    ctx.barrier()
    mine = {"gemm": [gemm_time(ctx, k) for k in gemms],
            "attention": [attention_times(ctx, shape, dt) for shape, dt in attns],
            "bandwidth": copy_bandwidth(ctx, max(4096, int(needs["op_bytes"]) // 2), iters=9),
            "tiny": expected(time_fn(ctx, tiny, 15, warmup=3, fence=False,
                                     clock=compute_clock(ctx))),
            "dtensor": dtensor_overhead(ctx) if needs["dtensor"] else 0.0}
    everyone = ctx.gather(mine)  # the slowest rank paces a synchronous step
    gemm_s = {k: max(r["gemm"][i] for r in everyone) for i, k in enumerate(gemms)}
    attention_s = {}
    for i, (shape, dt) in enumerate(attns):
        for way in ("forward", "backward"):
            attention_s[(way, shape, dt)] = max(r["attention"][i][way] for r in everyone)
    bandwidth = min(r["bandwidth"] for r in everyone)
    priced = calibration.Calibration(flops=0.0, peak_flops=0.0, gemm_s=gemm_s,
                                   attention_s=attention_s, bandwidth=bandwidth)
    t = priced.compute({"step": tiny_phase})
    tiny_s = max(r["tiny"] for r in everyone)
    probe = OverheadProbe(tiny, t["gemm"] + t["attention"] + t["memory_traffic"],
                          tiny_phase["ops"] + tiny_phase["views"])
    op_s = max(tiny_s - probe.priced_s, 0.0) / probe.ops
    dtensor_op_s = max(r["dtensor"] for r in everyone)
    # the links last: a call after compute is probed after as much compute as the step
    # runs before one, priced with what was just probed
    segments = segment_seconds(dataclasses.replace(priced, op_s=op_s,
                                                   dtensor_op_s=dtensor_op_s),
                               needs.get("segments", {}))
    links = {}
    if ctx.world > 1:
        for key, largest in sorted(needs["links"].items()):  # op, or op@n for n ranks
            op, _, n = key.partition("@")
            group = subgroups(ctx, int(n)) if n else None
            links[key], later = sweep_link(ctx, op, link_sizes(largest, int(n or ctx.world)),
                                           group=group, segment_s=segments.get(key))
            if later is not None:
                links[key + calibration.AFTER_COMPUTE] = later
    big = max(gemms, key=lambda k: gemm_s[k], default=None)
    rate = 2 * _mnk(big) / gemm_s[big] if big else 0.0
    peak, name = peak_for(ctx, dtype)
    peak = min(p for p in ctx.gather(peak))
    peak, tries, name = measured_peak(peak, name, rate)
    return calibration.Calibration(
        op_samples=[op_s], flops=rate, peak_flops=peak, peak_samples=tries,
        links=links, n=ctx.world, peak_name=name, gemm_s=gemm_s, attention_s=attention_s,
        op_s=op_s, dtensor_op_s=dtensor_op_s, bandwidth=bandwidth, segment_s=segments,
        host_overlaps=ctx.is_cuda), probe


def segments_of(census: dict, world: int) -> dict[str, tuple[dict, int]]:
    """{link key: (the census's phases, how many of its calls come after compute)} for
    every collective a strategy calls after compute (not point-to-point: links.py): the
    calibration probes such calls after as much compute as the step runs before one
    (``segment_seconds``)."""
    colls = census["collectives"]
    calls = sum(sum(c.get("after_compute_by_size", {}).values()) for c in colls.values())
    if not calls:
        return {}
    keys = {calibration.link_key(kind, n, world) for kind, c in colls.items()
            if kind not in ("send", "recv")
            for n, k in c.get("after_compute_by_size", {}).items() if k}
    return {key: (census["phases"], calls) for key in keys}


def segment_seconds(priced: calibration.Calibration,
                    segments: dict[str, list[tuple[dict, int]]]) -> dict[str, float]:
    """{link key: CPU seconds of compute a step runs before each of its calls that come
    after compute} from ``segments`` ({link key: [(a census's phases, how many of its
    calls come after compute)]}, one row per strategy and rank that uses the link): each
    row's priced compute over its calls, the median row's."""
    return {key: statistics.median(sum(priced.compute(phases).values()) / calls
                                   for phases, calls in rows)
            for key, rows in segments.items() if rows}


def measured_peak(peak: float, name: str, rate: float) -> tuple[float, list[float], str]:
    """The MFU denominator, its tries and its name. A datasheet or given peak is what it
    is; a measured one is the best of its tries, the model's own GEMM rate among them (a
    square GEMM need not be the fastest shape), so it is never below a rate the steps
    reached, and the spread recorded is that of the figure used."""
    if not name.startswith("measured"):
        return peak, [], name
    tries = [t for t in (peak, rate) if t > 0]
    return max(tries), tries, f"{name} or the model's own GEMM, the faster"


def _mnk(key: tuple) -> int:
    """M*N*K of a census GEMM key (batched: times the batch)."""
    _, a, _, b, _, _ = key
    batch = a[0] if len(a) == 3 else 1
    return batch * a[-2] * a[-1] * b[-1]
