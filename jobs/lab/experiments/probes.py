"""Timed probes shared by the benchmarks and by every experiment's calibration:
one collective of S bytes, one GEMM, one copy. Medians over iterations, each
iteration fenced by a barrier and a device synchronize. The collectives run on
the device's group (ctx.group); fences and timings travel as bookkeeping
(ctx.barrier, ctx.gather: CPU, gloo)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch
import torch.distributed as dist

from jobs.lab import costmodel
from jobs.lab.instrument import Comm
from jobs.lab.runtime import Context

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "send_recv", "all_to_all")


def collective(ctx: Context, op: str, nbytes: int, comm: Comm | None = None) -> Callable[[], None]:
    """A closure running `op` once on an S=nbytes buffer (nccl-tests sizing), either
    through raw torch.distributed or through the counting wrapper `comm`."""
    w, r, dev, g = ctx.world, ctx.rank, ctx.device, ctx.group
    n = max(w, nbytes // 4 // w * w)  # fp32 elements, divisible by the world size
    full = torch.ones(n, device=dev)
    part = torch.ones(n // w, device=dev)
    out = torch.empty_like(full)
    nxt, prv = (r + 1) % w, (r - 1) % w
    if op == "all_reduce":
        return (lambda: comm.all_reduce(full)) if comm else \
            (lambda: dist.all_reduce(full, group=g))
    if op == "all_gather":
        return (lambda: comm.all_gather(out, part)) if comm else \
            (lambda: dist.all_gather_into_tensor(out, part, group=g))
    if op == "reduce_scatter":
        return (lambda: comm.reduce_scatter(part, full)) if comm else \
            (lambda: dist.reduce_scatter_tensor(part, full, group=g))
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
    """Read+write bytes per second of a large device copy."""
    src = torch.ones(nbytes // 4, device=ctx.device)
    dst = torch.empty_like(src)
    times = time_fn(ctx, lambda: dst.copy_(src), iters, warmup=1, fence=False)
    return 2 * nbytes / statistics.median(times)


def calibrate(ctx: Context, ops: list[str], gemm_shape: tuple[int, int, int],
              sizes: tuple[int, int] = (4096, 1 << 20), iters: int = 5) -> costmodel.Calibration:
    """Quick in-run calibration: alpha and W for each op from two sizes, the compute
    rate C from a GEMM of the model's shape run on all ranks at once, and the peak
    (the better of that and a 512^3 GEMM) as the CPU MFU denominator."""
    links = {}
    if ctx.world > 1:
        for op in ops:
            samples = []
            for S in sizes:
                fn = collective(ctx, op, S)
                med = slowest_median(ctx, time_fn(ctx, fn, iters, warmup=1))
                samples.append((message_bytes(op, S, ctx.world), med))
            links[op] = costmodel.fit_link(op, ctx.world, samples)
    M, N, K = gemm_shape
    ctx.barrier()
    rate, _ = gemm_flops(ctx, M, N, K)
    edge = 4096 if ctx.is_cuda else 512
    big, _ = gemm_flops(ctx, edge, edge, edge)  # fp32, the dtype the gated models train in
    both = ctx.gather((rate, big))
    # the slowest rank paces a synchronous step
    flops = min(b[0] for b in both)
    peak = min(b[1] for b in both)
    return costmodel.Calibration(flops=flops, peak_flops=max(peak, flops), links=links,
                                 n=ctx.world, peak_name=f"measured {edge}^3 float32 GEMM")
