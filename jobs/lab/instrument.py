"""One instrumentation layer: a timeline of events, a counting collective wrapper,
and a meter for activations saved for backward.

Every collective a hand-written strategy issues goes through :class:`Comm`, which
counts bytes (the nccl-tests buffer size S), calls and time per kind and adds a
timeline event. Checks and bookkeeping use raw ``torch.distributed`` so they never
pollute the counts. Times are seconds since a common origin taken right after a
barrier, so events of different ranks share one clock.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.distributed as dist


class Timeline:
    def __init__(self, rank: int, origin: float | None = None) -> None:
        self.rank = rank
        self.origin = time.perf_counter() if origin is None else origin
        self.events: list[dict[str, Any]] = []
        self.tags: dict[str, Any] = {}  # strategy / step, stamped on every event

    def now(self) -> float:
        return time.perf_counter() - self.origin

    def add(self, kind: str, t0: float, t1: float, **fields: Any) -> None:
        self.events.append({"rank": self.rank, **self.tags, "kind": kind,
                            "t0": round(t0, 7), "t1": round(t1, 7), **fields})

    @contextmanager
    def span(self, kind: str, **fields: Any) -> Iterator[None]:
        t0 = self.now()
        try:
            yield
        finally:
            self.add(kind, t0, self.now(), **fields)

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
    """An async collective: bytes are counted at launch, time when wait() returns."""

    def __init__(self, comm: Comm, work: Any, kind: str, nbytes: int, t0: float,
                 fields: dict) -> None:
        self.comm, self.work, self.kind, self.nbytes, self.t0 = comm, work, kind, nbytes, t0
        self.fields = fields

    def wait(self) -> None:
        self.work.wait()
        self.comm._sync()
        self.comm._record(self.kind, self.nbytes, self.t0, self.comm.timeline.now(),
                          asynchronous=True, **self.fields)


class Comm:
    """Counting wrapper over torch.distributed. Sizes follow nccl-tests: all_reduce,
    broadcast, send, recv: the tensor; all_gather: the gathered output;
    reduce_scatter: the unscattered input; all_to_all: the input."""

    def __init__(self, timeline: Timeline, sync: Callable[[], None] | None = None) -> None:
        self.timeline = timeline
        self._sync = sync or (lambda: None)
        self.counters: dict[str, dict[str, float]] = {}

    def reset(self) -> dict[str, dict[str, float]]:
        old, self.counters = self.counters, {}
        return old

    def _record(self, kind: str, nbytes: int, t0: float, t1: float, **fields: Any) -> None:
        c = self.counters.setdefault(kind, {"count": 0, "bytes": 0, "time_s": 0.0})
        c["count"] += 1
        c["bytes"] += nbytes
        c["time_s"] += t1 - t0
        self.timeline.add(kind, t0, t1, bytes=nbytes, **fields)

    def _run(self, kind: str, nbytes: int, fn: Callable[[], Any], async_op: bool,
             fields: dict) -> _Pending | None:
        t0 = self.timeline.now()
        work = fn()
        if async_op:
            return _Pending(self, work, kind, nbytes, t0, fields)
        self._sync()
        self._record(kind, nbytes, t0, self.timeline.now(), **fields)
        return None

    def all_reduce(self, t: torch.Tensor, group: Any = None, async_op: bool = False,
                   **fields: Any) -> _Pending | None:
        return self._run("all_reduce", t.numel() * t.element_size(),
                         lambda: dist.all_reduce(t, group=group, async_op=async_op),
                         async_op, fields)

    def all_reduce_future(self, t: torch.Tensor, group: Any = None,
                          **fields: Any) -> torch.futures.Future:
        """An all_reduce as a Future (what a DDP comm hook returns), counted at launch
        and timed when the future completes."""
        nbytes, t0 = t.numel() * t.element_size(), self.timeline.now()
        fut = dist.all_reduce(t, group=group, async_op=True).get_future()

        def done(f: torch.futures.Future) -> torch.Tensor:
            self._record("all_reduce", nbytes, t0, self.timeline.now(), asynchronous=True,
                         **fields)
            value = f.value()
            return value[0] if isinstance(value, list) else value

        return fut.then(done)

    def all_gather(self, out: torch.Tensor, inp: torch.Tensor, group: Any = None,
                   async_op: bool = False, **fields: Any) -> _Pending | None:
        return self._run("all_gather", out.numel() * out.element_size(),
                         lambda: dist.all_gather_into_tensor(out, inp, group=group,
                                                             async_op=async_op),
                         async_op, fields)

    def reduce_scatter(self, out: torch.Tensor, inp: torch.Tensor, group: Any = None,
                       async_op: bool = False, **fields: Any) -> _Pending | None:
        return self._run("reduce_scatter", inp.numel() * inp.element_size(),
                         lambda: dist.reduce_scatter_tensor(out, inp, group=group,
                                                            async_op=async_op),
                         async_op, fields)

    def broadcast(self, t: torch.Tensor, src: int, group: Any = None, **fields: Any) -> None:
        self._run("broadcast", t.numel() * t.element_size(),
                  lambda: dist.broadcast(t, src=src, group=group), False, fields)

    def all_to_all(self, out: torch.Tensor, inp: torch.Tensor, group: Any = None,
                   **fields: Any) -> None:
        self._run("all_to_all", inp.numel() * inp.element_size(),
                  lambda: dist.all_to_all_single(out, inp, group=group), False, fields)

    def send(self, t: torch.Tensor, dst: int, async_op: bool = False,
             **fields: Any) -> _Pending | None:
        if async_op:
            return self._run("send", t.numel() * t.element_size(),
                             lambda: dist.isend(t, dst), True, {"peer": dst, **fields})
        return self._run("send", t.numel() * t.element_size(),
                         lambda: dist.isend(t, dst).wait(), False, {"peer": dst, **fields})

    def recv(self, t: torch.Tensor, src: int, **fields: Any) -> None:
        self._run("recv", t.numel() * t.element_size(),
                  lambda: dist.irecv(t, src).wait(), False, {"peer": src, **fields})

    def send_recv(self, send_t: torch.Tensor, dst: int, recv_t: torch.Tensor, src: int,
                  **fields: Any) -> _Pending:
        """Post both, wait for the receive only: two neighbours exchanging never deadlock,
        and the send completes in the background (the caller waits on what is returned)."""
        t0 = self.timeline.now()
        sent = _Pending(self, dist.isend(send_t, dst), "send",
                        send_t.numel() * send_t.element_size(), t0, {"peer": dst, **fields})
        dist.irecv(recv_t, src).wait()
        self._sync()
        self._record("recv", recv_t.numel() * recv_t.element_size(), t0, self.timeline.now(),
                     peer=src, **fields)
        return sent


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
