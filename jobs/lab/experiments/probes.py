"""Timed probes shared by the benchmarks and by every experiment's calibration: a
collective of S bytes, a GEMM of a given shape and layout, an attention kernel, a copy,
and the per-operator overhead of a small step. Medians over iterations, each iteration
ended by a device synchronize (collectives: also fenced by a barrier). The collectives
run on the device's group (ctx.group); fences and timings travel as bookkeeping
(ctx.barrier, ctx.gather: CPU, gloo). Every rank probes at once, as every rank computes
at once in a step (on CPU they share the cores), and the slowest rank's figure is kept.

``calibrate`` measures what the cost model prices a step with - see cost.py - for
exactly the shapes and message sizes the run's strategies use (their census)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

from jobs.lab.components.census import OpCensus
from jobs.lab.components.context import NATIVE, Context, devices_served
from jobs.lab.components.instrument import Comm, all_gather_single, reduce_scatter_single
from jobs.lab.components.model import ModelConfig, build_model, loss_fn, make_batch
from jobs.lab.components.optim import make_optimizer
from jobs.lab.predict import calibration
from jobs.lab.predict.memory import RECIPES

DENSE_BF16_PEAKS = {"H100": 989e12, "H200": 989e12, "A100": 312e12}
OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "send_recv", "all_to_all")


def collective(ctx: Context, op: str, nbytes: int, comm: Comm | None = None,
               group: tuple[Any, list[int]] | None = None) -> Callable[[], None]:
    """A closure running `op` once on an S=nbytes buffer (nccl-tests sizing), either
    through raw torch.distributed or through the counting wrapper `comm`; over the whole
    world, or `group`: (a subgroup, its ranks)."""
    g, members = group or (ctx.group, list(range(ctx.world)))
    w, dev = len(members), ctx.device
    i = members.index(ctx.rank)
    n = max(w, nbytes // 4 // w * w)  # fp32 elements, divisible by the group's size
    full = torch.ones(n, device=dev)
    part = torch.ones(n // w, device=dev)
    out = torch.empty_like(full)
    nxt, prv = members[(i + 1) % w], members[(i - 1) % w]
    if op == "all_reduce":
        return (lambda: comm.all_reduce(full)) if comm else \
            (lambda: dist.all_reduce(full, group=g))
    if op == "all_gather":
        return (lambda: comm.all_gather(out, part)) if comm else \
            (lambda: all_gather_single(out, part, group=g))
    if op == "reduce_scatter":
        return (lambda: comm.reduce_scatter(part, full)) if comm else \
            (lambda: reduce_scatter_single(part, full, group=g))
    if op == "broadcast":
        return (lambda: comm.broadcast(full, 0)) if comm else \
            (lambda: dist.broadcast(full, 0, group=g))
    if op == "all_to_all":
        return (lambda: comm.all_to_all(out, full)) if comm else \
            (lambda: dist.all_to_all_single(out, full, group=g))
    if op == "send_recv":  # a ring: every rank sends to the next, receives from the previous
        def raw() -> None:  # one batch, as the pipelines post it (see Comm.p2p)
            for wk in dist.batch_isend_irecv([dist.P2POp(dist.isend, full, nxt, g),
                                              dist.P2POp(dist.irecv, out, prv, g)]):
                wk.wait()
        return (lambda: comm.p2p(sends=[(full, nxt)], recvs=[(out, prv)]).wait()) if comm \
            else raw
    raise ValueError(op)


def message_bytes(op: str, nbytes: int, world: int) -> int:
    """The S actually moved for a requested size (rounded to whole fp32 per rank)."""
    return max(world, nbytes // 4 // world * world) * 4


def time_fn(ctx: Context, fn: Callable[[], None], iters: int, warmup: int,
            fence: bool = True) -> list[float]:
    for _ in range(warmup):
        fn()
    ctx.sync()
    times = []
    for _ in range(iters):
        if fence:
            ctx.barrier()
        ctx.sync()
        t0 = time.perf_counter()
        fn()
        ctx.sync()
        times.append(time.perf_counter() - t0)
    return times


def device_times(ctx: Context, fn: Callable[[], None], iters: int, warmup: int) -> list[float]:
    """Seconds of each call as the device runs it, for what a step prices by shape (GEMMs,
    attention, copies). On CPU the host runs it: time_fn. On CUDA a synchronize after
    every call would add the host's launch and wait to a kernel that, in a step, runs
    while the host launches the next; the host's part is priced once, as the per-operator
    overhead, and composed with the device's by max (calibration.Calibration.compute). So the
    calls are queued behind a sleeping kernel and timed by events between them: the
    device runs them back to back, whatever the host's pace."""
    if not ctx.is_cuda:
        return time_fn(ctx, fn, iters, warmup, fence=False)
    for _ in range(warmup):
        fn()
    ctx.sync()
    marks = [torch.cuda.Event(enable_timing=True) for _ in range(iters + 1)]
    torch.cuda._sleep(SLEEP_CYCLES)
    marks[0].record()
    for mark in marks[1:]:
        fn()
        mark.record()
    ctx.sync()
    return [a.elapsed_time(b) / 1e3 for a, b in zip(marks, marks[1:], strict=False)]


SLEEP_CYCLES = 20_000_000  # GPU clock cycles: long enough to queue every call behind it


def expected(times: list[float]) -> float:
    """What one call costs in a step that makes many: their mean - a step adds up every
    call, its stalls included (a collective's median per call can be half its mean on a
    shared machine) - less the single slowest sample, so that one preemption of a short
    probe does not stand for many."""
    kept = sorted(times)[:-1] if len(times) >= 4 else times
    return statistics.fmean(kept)


def slowest_median(ctx: Context, times: list[float]) -> float:
    """The collective finishes when its slowest rank does."""
    return max(ctx.gather(statistics.median(times)))


def gemm_flops(ctx: Context, M: int, N: int, K: int, dtype: torch.dtype = torch.float32,
               iters: int = 5) -> tuple[float, list[float]]:
    a = torch.randn(M, K, device=ctx.device, dtype=dtype)
    b = torch.randn(K, N, device=ctx.device, dtype=dtype)
    times = time_fn(ctx, lambda: torch.mm(a, b), iters, warmup=2, fence=False)
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
    several, between its timed steps, and keeps the best (see training.py)."""
    edge = PEAK_EDGE[ctx.is_cuda]
    return gemm_flops(ctx, edge, edge, edge, dtype=getattr(torch, dtype), iters=3)[0]


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
        t = expected(time_fn(ctx, self.step, iters, warmup=1, fence=False))
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
    t_d = expected(time_fn(ctx, lambda: dt.mul_(1.0), iters, warmup=3, fence=False))
    t_l = expected(time_fn(ctx, lambda: local.mul_(1.0), iters, warmup=3, fence=False))
    return max(t_d - t_l, 0.0)


def link_sizes(largest: int, world: int) -> list[int]:
    """Message sizes for a fit: from 1 KiB by fours to the largest needed, and at least
    to 256 KiB - far enough from alpha for the slope to be W, not noise."""
    top = max(largest, 256 << 10)
    sizes, size = [], max(1024, 4 * world)
    while size < top:
        sizes.append(size)
        size *= 4
    return sizes + [top]


def subgroups(ctx: Context, n: int) -> tuple[Any, list[int]]:
    """This rank's group of n consecutive ranks (every rank creates every group, in one
    order), and its ranks: every group probes at once, as a mesh dimension's groups all
    run at once in a step. On one host where in the world a group sits changes nothing;
    across hosts a group's placement would matter, and is not probed."""
    backend = None if ctx.device.type in devices_served(ctx.backend) \
        else NATIVE[ctx.device.type]
    mine = None
    for start in range(0, ctx.world - n + 1, n):
        ranks = list(range(start, start + n))
        g = dist.new_group(ranks, backend=backend)
        if ctx.rank in ranks:
            mine = (g, ranks)
    return mine


SEGMENT_EDGE, SEGMENT_CALLS = 160, 3  # the compute before each call of the after-compute probe


def sweep_link(ctx: Context, op: str, sizes: list[int], repeats: int = 4,
               burst: int = 4, group: tuple[Any, list[int]] | None = None
               ) -> tuple[calibration.LinkFit, calibration.LinkFit | None]:
    """alpha and W of `op`, fitted to the time per call of bursts of `burst` calls in a
    row on as many different buffers - as a step issues them back to back: one after
    another, not each after a barrier, and each on its own tensor (gloo costs about twice
    as much per call on a fresh buffer as on the one it just reduced) - at every size,
    sizes visited round-robin `repeats` times, in turn up and down the sizes, so that the
    machine's drift and whatever a burst leaves behind hit them alike; with the fit's
    error against the expected times (``expected``).

    On CPU also the link as a call that comes after compute sees it (the second fit; None
    on CUDA): each call preceded on every rank by a few GEMMs (SEGMENT_*), less those GEMMs
    timed alone in the same sweep. Such a call does not find its peers already in the
    collective: each arrives from computing of its own, and on shared cores its gloo
    threads wake from sleep - in a tensor-parallel step a 64 KiB all-reduce between
    blocks cost several times its price in a burst. Never below the burst's price."""
    fns = {S: [collective(ctx, op, S, group=group) for _ in range(burst)] for S in sizes}
    times: dict[int, list[float]] = {S: [] for S in sizes}
    after: dict[int, list[float]] = {S: [] for S in sizes}
    seg: list[float] = []
    probe_after = not ctx.is_cuda
    a = torch.randn(SEGMENT_EDGE, SEGMENT_EDGE, device=ctx.device)

    def segment() -> None:
        for _ in range(SEGMENT_CALLS):
            torch.mm(a, a)

    def run(S: int, computed: bool = False) -> Callable[[], None]:
        def calls() -> None:
            for fn in fns[S]:
                if computed:
                    segment()
                fn()
        return calls

    def segments() -> None:
        for _ in range(burst):
            segment()

    for r in range(repeats):
        for S in (sizes if r % 2 == 0 else sizes[::-1]):
            times[S] += [t / burst for t in time_fn(ctx, run(S), 2, warmup=1)]
            if probe_after:
                after[S] += [t / burst for t in time_fn(ctx, run(S, True), 2, warmup=0)]
                seg += [t / burst for t in time_fn(ctx, segments, 2, warmup=0)]
    own = expected(seg) if seg else 0.0
    means = ctx.gather([(expected(times[S]), expected(after[S]) - own if probe_after else 0.0)
                        for S in sizes])
    n = len(group[1]) if group else ctx.world
    moved = [message_bytes(op, S, n) for S in sizes]
    samples = [(moved[i], max(m[i][0] for m in means)) for i in range(len(sizes))]
    fit = calibration.fit_link(op, n, samples)
    if not probe_after:
        return fit, None
    later = [(moved[i], max(samples[i][1], max(m[i][1] for m in means)))
             for i in range(len(sizes))]
    return fit, calibration.fit_link(op, n, later)


def calibrate(ctx: Context, needs: dict, dtype: str = "float32",
              precision: str = "fp32_sgd") -> tuple[calibration.Calibration, OverheadProbe]:
    """What this run's step times are priced with, measured for what its strategies run
    (``needs``: the same on every rank - links {op: largest message}, gemm and attention
    keys from the census, the model kind, whether DTensor is used, the mean bytes of an
    operator): a link fit per collective, a time per GEMM and attention shape, the
    per-operator overhead from a tiny step of the same kind of model (its measured time,
    less what its GEMMs, attention and bytes cost, per operator), and the copy bandwidth
    at the size of an operator's tensors."""
    links = {}
    if ctx.world > 1:
        for key, largest in sorted(needs["links"].items()):  # op, or op@n for n ranks
            op, _, n = key.partition("@")
            group = subgroups(ctx, int(n)) if n else None
            links[key], later = sweep_link(ctx, op, link_sizes(largest, int(n or ctx.world)),
                                           group=group)
            if later is not None:
                links[key + calibration.AFTER_COMPUTE] = later
    tiny, tiny_phase = tiny_step(ctx, needs["kind"], precision)
    gemms = sorted(set(needs["gemm"]) | set(tiny_phase["gemm"]))
    attns = sorted({(k[1], k[2]) for k in set(needs["attention"]) | set(tiny_phase["attention"])})
    ctx.barrier()
    mine = {"gemm": [gemm_time(ctx, k) for k in gemms],
            "attention": [attention_times(ctx, shape, dt) for shape, dt in attns],
            "bandwidth": copy_bandwidth(ctx, max(4096, int(needs["op_bytes"]) // 2), iters=9),
            "tiny": expected(time_fn(ctx, tiny, 15, warmup=3, fence=False)),
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
    big = max(gemms, key=lambda k: gemm_s[k], default=None)
    rate = 2 * _mnk(big) / gemm_s[big] if big else 0.0
    peak, name = peak_for(ctx, dtype)
    peak = min(p for p in ctx.gather(peak))
    return calibration.Calibration(
        op_samples=[op_s],
        flops=rate, peak_flops=max(peak, rate) if name.startswith("measured") else peak,
        peak_samples=[peak] if name.startswith("measured") else [],
        links=links, n=ctx.world, peak_name=name, gemm_s=gemm_s, attention_s=attention_s,
        op_s=op_s, dtensor_op_s=max(r["dtensor"] for r in everyone), bandwidth=bandwidth,
        host_overlaps=ctx.is_cuda), probe


def _mnk(key: tuple) -> int:
    """M*N*K of a census GEMM key (batched: times the batch)."""
    _, a, _, b, _, _ = key
    batch = a[0] if len(a) == 3 else 1
    return batch * a[-2] * a[-1] * b[-1]
