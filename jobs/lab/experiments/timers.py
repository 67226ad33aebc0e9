"""Timing primitives of the probes (jobs/lab/experiments/probes.py, links.py): a fenced,
synchronized loop of calls, a device's back-to-back execution time, the expected cost of a
call in a step that makes many, and the kernel's account of how much of a core this
thread got (schedstat), with the clock that counts a CPU rank's own compute."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

from jobs.lab.components.context import Context

SCHEDSTAT = Path("/proc/thread-self/schedstat")


def sched() -> tuple[float, float] | None:
    """(seconds on a CPU, seconds runnable but waiting for a CPU) of the calling thread
    so far, as the kernel counts them; None where it does not say."""
    try:
        run, wait, _ = SCHEDSTAT.read_text().split()
        return int(run) / 1e9, int(wait) / 1e9
    except (OSError, ValueError):
        return None


def cpu_share(run: float, wait: float) -> float:
    """The share of a core a thread got while it wanted one: on-CPU time over on-CPU plus
    runnable-but-waiting time (a thread asleep in a collective wants none)."""
    return run / (run + wait) if run + wait > 0 else 1.0


def compute_clock(ctx: Context) -> Callable[[], float]:
    """What a compute probe is timed by: on CPU the thread's own CPU time (its work,
    whatever share of a core the host gave it - the share is taken apart, where the steps
    ran: training.py), on CUDA the wall clock around a synchronize."""
    return time.perf_counter if ctx.is_cuda else time.thread_time


def time_fn(ctx: Context, fn: Callable[[], None], iters: int, warmup: int,
            fence: bool = True, clock: Callable[[], float] = time.perf_counter) -> list[float]:
    """Seconds of each of `iters` calls of fn (after `warmup`), each fenced by a barrier
    (or not) and ended by a device synchronize, by `clock` (wall, or compute_clock's)."""
    for _ in range(warmup):
        fn()
    ctx.sync()
    times = []
    for _ in range(iters):
        if fence:
            ctx.barrier()
        ctx.sync()
        t0 = clock()
        fn()
        ctx.sync()
        times.append(clock() - t0)
    return times


def device_times(ctx: Context, fn: Callable[[], None], iters: int, warmup: int) -> list[float]:
    """Seconds of each call as the device runs it, for what a step prices by shape (GEMMs,
    attention, copies). On CPU the host runs it: time_fn, by the thread's CPU time. On
    CUDA a synchronize after every call would add the host's launch and wait to a kernel
    that, in a step, runs
    while the host launches the next; the host's part is priced once, as the per-operator
    overhead, and composed with the device's by max (calibration.Calibration.compute). So the
    calls are queued behind a sleeping kernel and timed by events between them: the
    device runs them back to back, whatever the host's pace."""
    if not ctx.is_cuda:
        return time_fn(ctx, fn, iters, warmup, fence=False, clock=compute_clock(ctx))
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

