"""Collective probes: one collective of S bytes over the world or a subgroup, and the
alpha-beta sweep a run's calibration fits each link with - back to back, and (on CPU)
after compute (jobs/lab/experiments/probes.py's ``calibrate`` asks for them)."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from jobs.lab.components.context import NATIVE, Context, devices_served
from jobs.lab.components.instrument import Comm, all_gather_single, reduce_scatter_single
from jobs.lab.experiments.timers import expected, time_fn
from jobs.lab.predict import calibration

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
    on CUDA and for point-to-point, whose wait a pipeline's schedule prices): each call
    preceded on every rank by a few GEMMs (SEGMENT_*), less those GEMMs timed alone right
    after (the median of such differences). Such a call does not find its peers already
    in the collective: each arrives from computing of its own, and on shared cores its
    gloo threads wake from sleep (docs/EXPERIMENTS.md, *The cost model*, has what that
    costs here). Never below the burst's price."""
    fns = {S: [collective(ctx, op, S, group=group) for _ in range(burst)] for S in sizes}
    times: dict[int, list[float]] = {S: [] for S in sizes}
    after: dict[int, list[float]] = {S: [] for S in sizes}  # per call, less its GEMMs
    probe_after = not ctx.is_cuda and op != "send_recv"  # a pipeline's wait is its schedule's
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
            if probe_after:  # each burst after compute less its GEMMs timed next to it
                mixed = time_fn(ctx, run(S, True), 2, warmup=0)
                alone = time_fn(ctx, segments, 2, warmup=0)
                after[S] += [(m - g) / burst for m, g in zip(mixed, alone, strict=True)]
    # after compute: the median difference, as a difference of two times on a shared
    # host is thrown by a preemption of either, which a mean would take for the cost
    means = ctx.gather([(expected(times[S]), statistics.median(after[S]) if probe_after
                         else 0.0) for S in sizes])
    n = len(group[1]) if group else ctx.world
    moved = [message_bytes(op, S, n) for S in sizes]
    samples = [(moved[i], max(m[i][0] for m in means)) for i in range(len(sizes))]
    fit = calibration.fit_link(op, n, samples)
    if not probe_after:
        return fit, None
    later = [(moved[i], max(samples[i][1], max(m[i][1] for m in means)))
             for i in range(len(sizes))]
    return fit, calibration.fit_link(op, n, later)


