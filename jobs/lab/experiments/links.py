"""Collective probes: one collective of S bytes over the world or a subgroup, and the
alpha-beta sweep a run's calibration fits each link with - back to back, and (on CPU)
after compute (jobs/lab/experiments/probes.py's ``calibrate`` asks for them)."""

from __future__ import annotations

import time
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


SLICE_EDGE = 64  # a timed segment's GEMMs: small, so that it stops near its CPU time


def compute_segment(ctx: Context, seconds: float | None = None) -> Callable[[], None]:
    """The compute each rank runs before a call of the after-compute probe: `seconds` of
    this thread's CPU time (the step's own compute before such a call, as the census
    prices it: probes.segment_seconds), or SEGMENT_CALLS GEMMs of SEGMENT_EDGE where that
    is not known. Its length matters: a call after a longer segment finds its peer later
    and its gloo threads longer asleep (bench/after_compute.py --gemms)."""
    if seconds is None:
        a = torch.randn(SEGMENT_EDGE, SEGMENT_EDGE, device=ctx.device)

        def segment() -> None:
            for _ in range(SEGMENT_CALLS):
                torch.mm(a, a)
        return segment
    b = torch.randn(SLICE_EDGE, SLICE_EDGE, device=ctx.device)

    def timed() -> None:
        t0 = time.thread_time()
        while time.thread_time() - t0 < seconds:
            torch.mm(b, b)
    return timed


def after_compute_calls(ctx: Context, fns: list[Callable[[], None]],
                        segment: Callable[[], None]) -> list[float]:
    """Seconds of each call of `fns` (CPU: done when it returns) that every rank makes
    after a segment of compute, each timed by itself from its start to its return - as
    the counting wrapper times a step's calls, the wait for a peer still computing
    included. Not (segments and calls) less (segments alone): with more ranks than cores
    a rank asleep in a call hands its core to the others, whose segments then run faster
    than alone, so that difference undercounts the calls (bench/after_compute.py prints
    both)."""
    ctx.barrier()
    out = []
    for fn in fns:
        segment()
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def sweep_link(ctx: Context, op: str, sizes: list[int], repeats: int = 4,
               burst: int = 4, group: tuple[Any, list[int]] | None = None,
               segment_s: float | None = None
               ) -> tuple[calibration.LinkFit, calibration.LinkFit | None]:
    """alpha and W of `op`, fitted to the time per call of bursts of `burst` calls in a
    row on as many different buffers - as a step issues them back to back: one after
    another, not each after a barrier, and each on its own tensor (gloo costs about twice
    as much per call on a fresh buffer as on the one it just reduced) - at every size,
    sizes visited round-robin `repeats` times, in turn up and down the sizes, so that the
    machine's drift and whatever a burst leaves behind hit them alike; with the fit's
    error against the expected times (``expected``).

    On CPU also the link as a call that comes after compute sees it (the second fit; None
    on CUDA and for point-to-point, whose wait a pipeline's schedule prices):
    ``after_compute_calls``, each after `segment_s` of compute (``compute_segment``).
    Such a call does not find its peers already in the collective: each arrives from
    computing of its own, and on shared cores its gloo threads wake from sleep
    (docs/EXPERIMENTS.md, *The cost model*, has what that costs here). Never below the
    burst's price."""
    fns = {S: [collective(ctx, op, S, group=group) for _ in range(burst)] for S in sizes}
    times: dict[int, list[float]] = {S: [] for S in sizes}
    after: dict[int, list[float]] = {S: [] for S in sizes}  # each call after compute
    probe_after = not ctx.is_cuda and op != "send_recv"  # a pipeline's wait is its schedule's
    segment = compute_segment(ctx, segment_s)

    def run(S: int) -> Callable[[], None]:
        def calls() -> None:
            for fn in fns[S]:
                fn()
        return calls

    for r in range(repeats):
        for S in (sizes if r % 2 == 0 else sizes[::-1]):
            times[S] += [t / burst for t in time_fn(ctx, run(S), 2, warmup=1)]
            if probe_after:  # one burst a visit: a step's segment can be long
                after[S] += after_compute_calls(ctx, fns[S], segment)
    means = ctx.gather([(expected(times[S]), expected(after[S]) if probe_after else 0.0)
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


def nothing() -> None:
    """No compute: point-to-point's calls are sampled back to back."""


class LinkDrift:
    """The links again, between timed rounds (CPU): a link probed once before the steps
    can read twice or half what the same calls cost while the steps run, as a shared
    host's load and its threads' wake-ups come and go. Each round times `burst` calls of
    every link at the largest message its steps send, as they are priced: after the
    calibration's segment where an after-compute link was probed (``after_compute_calls``),
    else back to back (point-to-point); the slowest rank's time per call over the link's
    price at that size is the round's ratio, every one kept beside the calibration
    (calibration.Calibration.link_ratios), which prices."""

    def __init__(self, ctx: Context, cal: calibration.Calibration, needs: dict,
                 burst: int = 4) -> None:
        self.items: list[tuple[str, list[Callable[[], None]], Callable[[], None] | None,
                               float]] = []
        self.ratios: dict[str, list[float]] = {}
        if ctx.is_cuda or ctx.world == 1:
            return
        for key, largest in sorted(needs["links"].items()):
            after = cal.links.get(key + calibration.AFTER_COMPUTE)
            if after is None and key != "send_recv":
                continue  # a collective is sampled as it is priced after compute
            op, _, size = key.partition("@")
            n = int(size or ctx.world)
            group = subgroups(ctx, n) if size else None
            fns = [collective(ctx, op, largest, group=group) for _ in range(burst)]
            priced = (after or cal.links[key]).per_call(op, message_bytes(op, largest, n), n)
            segment = compute_segment(ctx, cal.segment_s.get(key)) if after else None
            self.items.append((key, fns, segment, priced))
        self.ratios = {key: [] for key, *_ in self.items}

    def sample(self, ctx: Context) -> None:
        if not self.items:
            return
        mine = []
        for _, fns, segment, _ in self.items:
            # one call untimed first: the sweep's calls follow the same size's burst,
            # these would follow a round and the probes after it
            fns[0]()
            mine.append(expected(after_compute_calls(ctx, fns, segment or nothing)))
        every = ctx.gather(mine)
        for i, (key, _, _, priced) in enumerate(self.items):
            self.ratios[key].append(max(r[i] for r in every) / priced)
