"""One instrumentation layer: a timeline of events, a counting collective wrapper,
and a meter for activations saved for backward.

Every collective a hand-written strategy issues goes through :class:`Comm`, which
counts bytes (the nccl-tests buffer size S), calls and time per kind and adds a
timeline event, without ever blocking (no device synchronize in timed code). Checks
and bookkeeping go around it (the context's CPU group) so they never pollute the
counts. Times are seconds since a common origin taken right after a
barrier, so events of different ranks share one clock.

On CUDA a span's host clock would measure kernel launches, not their execution: every
span records two CUDA events on the current stream, and ``Timeline.resolve()`` - called
after the step's own synchronize - replaces the host times by the events' times, placed
on the common clock through an anchor event recorded while the device was idle (right
after the step's opening synchronize). A collective runs on NCCL's own stream, so events
on the compute stream around its wait() would time whatever compute was queued before
the wait too (the backward it overlaps): each collective is timed on a timing stream of
its group's, which waits for the compute stream at launch (the collective cannot start
before that either, nor before its group's previous one, which this stream also waited
for) and for the collective's work right after launch, so its two events bracket the
collective alone.
"""

from __future__ import annotations

import json
import time
import zlib
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
import torch.distributed as dist

# torch 2.13 renamed the tensor-in, tensor-out collectives (the old names warn on every
# call); older torch, which the lab still runs on, has only the old ones
all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
reduce_scatter_single = (getattr(dist, "reduce_scatter_single", None)
                         or dist.reduce_scatter_tensor)


class Timeline:
    def __init__(self, rank: int, origin: float | None = None,
                 device: torch.device | None = None) -> None:
        self.rank = rank
        self.origin = time.perf_counter() if origin is None else origin
        self.events: list[dict[str, Any]] = []
        self.tags: dict[str, Any] = {}  # strategy / step, stamped on every event
        self.open: list[str] = []  # kinds of the spans open now, innermost last
        self.device = device
        self.cuda = device is not None and device.type == "cuda"
        self._unread: list[tuple[dict, Any, Any]] = []  # (event, start, end): CUDA, unread
        self._anchor: tuple[Any, float] | None = None

    def now(self) -> float:
        return time.perf_counter() - self.origin

    def phase(self) -> str:
        """The innermost open span (forward, backward, optimizer ...): what runs now."""
        return self.open[-1] if self.open else "step"

    def add(self, kind: str, t0: float, t1: float, **fields: Any) -> dict[str, Any]:
        event = {"rank": self.rank, **self.tags, "kind": kind,
                 "t0": round(t0, 7), "t1": round(t1, 7), **fields}
        self.events.append(event)
        return event

    # -- device clock (CUDA): events now, times after the step's synchronize
    def mark(self) -> Any:
        """A CUDA event on this device's current stream, whichever thread asks (DDP's
        callback, the autograd engine's); None on CPU, where the host clock is the truth."""
        if not self.cuda:
            return None
        event = torch.cuda.Event(enable_timing=True)
        event.record(torch.cuda.current_stream(self.device))
        return event

    def anchor(self) -> None:
        """Call right after a device synchronize: the device is idle, so an event recorded
        now runs now, and ties the device clock to the host's."""
        if self.cuda:
            self._anchor = (self.mark(), self.now())

    def on_device(self, event: dict[str, Any], start: Any, end: Any) -> None:
        """Give `event` the execution times of (start, end) once they can be read."""
        if start is not None:
            self._unread.append((event, start, end))

    def resolve(self) -> None:
        """Read the CUDA events of the step (after its synchronize: nothing waits)."""
        for event, start, end in self._unread:
            end.synchronize()
            if self._anchor is not None:
                base, at = self._anchor
                t0 = at + base.elapsed_time(start) / 1e3
            else:  # no anchor (the gate's steps): launch time, execution length
                t0 = event["t0"]
            event.update(t0=round(t0, 7), t1=round(t0 + start.elapsed_time(end) / 1e3, 7),
                         clock="cuda_event")
        self._unread = []

    @contextmanager
    def span(self, kind: str, **fields: Any) -> Iterator[None]:
        self.open.append(kind)
        start, t0 = self.mark(), self.now()
        try:
            yield
        finally:
            self.open.pop()
            self.on_device(self.add(kind, t0, self.now(), **fields), start, self.mark())

    def write(self, path: str) -> None:
        with open(path, "w") as fh:
            for ev in self.events:
                fh.write(json.dumps(ev) + "\n")

    def summary(self, **match: Any) -> dict[str, dict[str, float]]:
        """Count and total seconds per event kind, over events whose tags match."""
        out: dict[str, dict[str, float]] = defaultdict(lambda: {"count": 0, "time_s": 0.0})
        for ev in self.events:
            if all(ev.get(k) == v for k, v in match.items()):
                out[ev["kind"]]["count"] += 1
                out[ev["kind"]]["time_s"] += ev["t1"] - ev["t0"]
        return dict(out)


class _Pending:
    """Collectives in flight: bytes were counted at launch, time is taken when wait()
    returns (on CUDA the end was recorded on the timing stream at launch: `end`)."""

    def __init__(self, comm: Comm, works: list, records: list[tuple], end: Any = None) -> None:
        self.comm, self.works, self.records, self.end = comm, works, records, end

    def wait(self) -> None:
        for work in self.works:
            work.wait()
        for record in self.records:
            self.comm._time(*record, self.end)
        self.works, self.records = [], []


class Comm:
    """Counting wrapper over torch.distributed. Sizes follow nccl-tests: all_reduce,
    broadcast, send, recv: the tensor; all_gather: the gathered output;
    reduce_scatter: the unscattered input; all_to_all: the input.

    It never blocks: bytes and calls are counted at launch; time is host seconds on
    CPU (gloo's work is done when the call or its wait() returns) and CUDA events on
    the group's timing stream on GPU (the module docstring), read in reset(), which the
    experiment calls after its step's own synchronize. Calls use ``group`` unless given
    another. On CUDA every call is launched asynchronously and, when the caller asked
    for a synchronous one, waited for at once: what nccl does for a synchronous call."""

    def __init__(self, timeline: Timeline, group: Any = None,
                 device: torch.device | None = None) -> None:
        self.timeline, self.group, self.device = timeline, group, device
        self.cuda = device is not None and device.type == "cuda"
        self.counters: dict[str, dict[str, float]] = {}
        self._unread: list[tuple[str, dict]] = []  # CUDA-timed calls: (kind, event)
        self._streams: dict[Any, Any] = {}  # CUDA: a timing stream per group
        self._names: dict[Any, str] = {}  # group -> its name on events

    def _timing_stream(self, group: Any) -> Any:
        if group not in self._streams:
            self._streams[group] = torch.cuda.Stream(self.device)
        return self._streams[group]

    def _start(self, group: Any) -> Any:
        """CUDA: an event when a collective launched now on `group` can start."""
        if not self.cuda:
            return None
        stream = self._timing_stream(group)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        event = torch.cuda.Event(enable_timing=True)
        event.record(stream)
        return event

    def _end(self, group: Any, works: list) -> Any:
        """CUDA: an event when `works` (just launched on `group`) have ended."""
        if not self.cuda:
            return None
        stream = self._timing_stream(group)
        with torch.cuda.stream(stream):
            for work in works:
                work.wait()  # (nccl: makes the current stream, this one, wait)
        event = torch.cuda.Event(enable_timing=True)
        event.record(stream)
        return event

    def reset(self) -> dict[str, dict[str, float]]:
        self.timeline.resolve()  # after the step's synchronize: nothing timed waits
        for kind, event in self._unread:
            self._counter(kind)["time_s"] += event["t1"] - event["t0"]
        self._unread = []
        old, self.counters = self.counters, {}
        return old

    def _counter(self, kind: str) -> dict[str, float]:
        return self.counters.setdefault(kind, {"count": 0, "bytes": 0, "time_s": 0.0})

    def _launch(self, kind: str, nbytes: int, fields: dict, group: Any = None) -> tuple:
        c = self._counter(kind)
        c["count"] += 1
        c["bytes"] += nbytes
        if not isinstance(group, tuple):  # a collective (p2p's events name their peer)
            fields = {**fields, "group": self._group_name(group)}
        return kind, nbytes, self._start(group), self.timeline.now(), fields

    def _group_name(self, group: Any) -> str:
        """The group's ranks ("0-2-4-6"), or a digest of them when that is long: the k-th
        collective of a group on one rank is its k-th on every other (the order every rank
        of a group issues them in), which is how a view matches them to align the clocks."""
        if group not in self._names:
            ranks = dist.get_process_group_ranks(dist.group.WORLD if group is None else group)
            name = "-".join(map(str, ranks))
            self._names[group] = name if len(name) <= 32 else f"h{zlib.crc32(name.encode()):x}"
        return self._names[group]

    def _time(self, kind: str, nbytes: int, start: Any, host_t0: float, fields: dict,
              end: Any) -> None:
        """The call has ended: on CPU now; on CUDA when `end` (an event on the timing
        stream, after the collective's work) runs."""
        event = self.timeline.add(kind, host_t0, self.timeline.now(), bytes=nbytes, **fields)
        if self.cuda:
            self.timeline.on_device(event, start, end)
            self._unread.append((kind, event))
        else:
            self._counter(kind)["time_s"] += event["t1"] - event["t0"]

    def _run(self, kind: str, nbytes: int, fn: Callable[[bool], Any], async_op: bool,
             fields: dict, group: Any = None) -> _Pending | None:
        """`fn(async_op)` launches the call on `group` (None: this wrapper's)."""
        group = self._g(group)
        record = self._launch(kind, nbytes, {"asynchronous": True, **fields} if async_op
                              else fields, group)
        works = []
        if async_op or self.cuda:
            works.append(fn(True))
        else:
            fn(False)  # gloo: done when it returns
        pending = _Pending(self, works, [record], self._end(group, works))
        if async_op:
            return pending
        pending.wait()
        return None

    def _g(self, group: Any) -> Any:
        return self.group if group is None else group

    def all_reduce(self, t: torch.Tensor, group: Any = None, async_op: bool = False,
                   **fields: Any) -> _Pending | None:
        return self._run("all_reduce", t.numel() * t.element_size(),
                         lambda a: dist.all_reduce(t, group=self._g(group), async_op=a),
                         async_op, fields, group)

    def all_reduce_future(self, t: torch.Tensor, group: Any = None,
                          **fields: Any) -> torch.futures.Future:
        """An all_reduce as a Future (what a DDP comm hook returns), counted at launch
        and timed when the future completes (on CUDA the callback runs on streams that
        wait for the collective, so an event recorded there marks its end)."""
        group = self._g(group)
        record = self._launch("all_reduce", t.numel() * t.element_size(),
                              {"asynchronous": True, **fields}, group)
        work = dist.all_reduce(t, group=group, async_op=True)
        end = self._end(group, [work])
        fut = work.get_future()

        def done(f: torch.futures.Future) -> torch.Tensor:
            self._time(*record, end)
            value = f.value()
            return value[0] if isinstance(value, list) else value

        return fut.then(done)

    def all_gather(self, out: torch.Tensor, inp: torch.Tensor, group: Any = None,
                   async_op: bool = False, **fields: Any) -> _Pending | None:
        return self._run("all_gather", out.numel() * out.element_size(),
                         lambda a: all_gather_single(out, inp, group=self._g(group),
                                                           async_op=a),
                         async_op, fields, group)

    def reduce_scatter(self, out: torch.Tensor, inp: torch.Tensor, group: Any = None,
                       async_op: bool = False, **fields: Any) -> _Pending | None:
        return self._run("reduce_scatter", inp.numel() * inp.element_size(),
                         lambda a: reduce_scatter_single(out, inp, group=self._g(group),
                                                               async_op=a),
                         async_op, fields, group)

    def broadcast(self, t: torch.Tensor, src: int, group: Any = None, **fields: Any) -> None:
        self._run("broadcast", t.numel() * t.element_size(),
                  lambda a: dist.broadcast(t, src=src, group=self._g(group), async_op=a),
                  False, fields, group)

    def all_to_all(self, out: torch.Tensor, inp: torch.Tensor, group: Any = None,
                   **fields: Any) -> None:
        self._run("all_to_all", inp.numel() * inp.element_size(),
                  lambda a: dist.all_to_all_single(out, inp, group=self._g(group), async_op=a),
                  False, fields, group)

    def p2p(self, sends: Sequence[tuple[torch.Tensor, int]] = (),
            recvs: Sequence[tuple[torch.Tensor, int]] = (), **fields: Any) -> _Pending:
        """Sends and receives (tensor, global peer rank) posted as one batch_isend_irecv,
        which nccl runs as one group: two ranks exchanging in both directions never wait
        on each other (posted one by one, each side's send can block its stream to the
        other past nccl's eager size). The caller waits on what is returned."""
        ops, records = [], []
        for kind, items, op in (("send", sends, dist.isend), ("recv", recvs, dist.irecv)):
            for t, peer in items:
                ops.append(dist.P2POp(op, t, peer, self.group))
                records.append(self._launch(kind, t.numel() * t.element_size(),
                                            {"peer": peer, **fields}, ("p2p", self.group)))
        works = dist.batch_isend_irecv(ops)
        return _Pending(self, works, records, self._end(("p2p", self.group), works))


class _Saved:
    __slots__ = ("meter", "tensor", "key")

    def __init__(self, meter: SavedActivations, tensor: torch.Tensor, key: int) -> None:
        self.meter, self.tensor, self.key = meter, tensor, key

    def __del__(self) -> None:
        self.meter._release(self.key)


class SavedActivations:
    """Live and peak bytes of the tensors autograd saves for backward, counting each
    storage once and leaving parameters out: on CPU this is the activation memory.
    ``SavedActivations.active`` is the meter in use, so a schedule can read it."""

    active: SavedActivations | None = None

    def __init__(self, params: list[torch.Tensor]) -> None:
        self.param_storages = {getattr(p, "_local_tensor", p).untyped_storage().data_ptr()
                               for p in params}
        self.live: dict[int, list[int]] = {}
        self.current = self.peak = 0
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)

    def _pack(self, t: torch.Tensor) -> Any:
        local = getattr(t, "_local_tensor", t)  # a DTensor's storage is its local shard's
        storage = local.untyped_storage()
        key = storage.data_ptr()
        if key in self.param_storages or t.device.type == "meta":
            return t
        entry = self.live.get(key)
        if entry is None:
            self.live[key] = [1, storage.nbytes()]
            self.current += storage.nbytes()
            self.peak = max(self.peak, self.current)
        else:
            entry[0] += 1
        return _Saved(self, t, key)

    @staticmethod
    def _unpack(obj: Any) -> torch.Tensor:
        return obj.tensor if isinstance(obj, _Saved) else obj

    def _release(self, key: int) -> None:
        entry = self.live.get(key)
        if entry is None:
            return
        entry[0] -= 1
        if entry[0] == 0:
            self.current -= entry[1]
            del self.live[key]

    def __enter__(self) -> SavedActivations:
        self._hooks.__enter__()
        SavedActivations.active = self
        return self

    def __exit__(self, *exc: Any) -> None:
        SavedActivations.active = None
        self._hooks.__exit__(*exc)


def tensor_bytes(tensors: Any) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)
