"""What one step does, seen from below: the operators it runs and the collectives it
issues (from the dispatcher), and the memory it holds (from the allocator).

:class:`OpCensus` is a TorchDispatchMode, active for one untimed step of each strategy
right after its gate. It sees every operator after autograd - in backward too, since the
engine carries the mode into its threads - and records, per phase of the step (the
innermost open timeline span: forward, backward, optimizer, schedule):

- matrix multiplies by shape and layout (mm, addmm, bmm, baddbmm): the probes time each,
- attention (scaled_dot_product_* kernels) by shape and direction, timed the same way,
- every other operator, with the bytes it reads and writes (views move none),
- DTensor dispatches: DTensor is let through (NotImplemented, as PyTorch's CommDebugMode
  does) so that the mode sees the local operators and functional collectives it turns
  into; each DTensor-level call is counted, since it costs Python of its own,
- collectives, whoever issued them - the counting wrapper, DDP's reducer, FSDP2,
  DTensor, torch.distributed.pipelining - with nccl-tests sizes S (all_gather: the
  gathered output; reduce_scatter: the unscattered input; the others: the tensor), per
  group size, and how many of them come after compute (a matrix multiply or attention
  since the collective before): such a call finds its peers arriving from computing of
  their own, not from the call before it, and is priced with the link probed that way.

Fake tensors (DTensor's sharding propagation) run without being counted. The census is
plain data (``profile()``): the cost model prices it with the calibration's probes.

:class:`LiveStorage` follows every tensor storage alive over a strategy's whole life on
CPU - built, one step, one measured step - and reports the bytes alive at the measured
step's start and at its peak: the memory measured independently of any formula. On CUDA
the caching allocator's ``max_memory_allocated`` says the same, and is used instead.
"""

from __future__ import annotations

import gc
import sys
import threading
import weakref
from collections import defaultdict, deque
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten


def group_size(args: tuple) -> int:
    """Ranks in the process group a collective's arguments name: a c10d operator carries
    the group itself (a ScriptObject), a functional one its registered name. 0: none."""
    for a in args:
        if type(a).__name__ == "ScriptObject" and \
                a._type().qualified_name().endswith(".ProcessGroup"):
            return dist.ProcessGroup.unbox(a).size()
        if isinstance(a, str):
            try:
                return dist.distributed_c10d._resolve_process_group(a).size()
            except (ValueError, RuntimeError, KeyError):
                continue  # a reduce op's name, not a group's
    return 0


def is_dtensor(types: Any) -> bool:
    """Whether any of the types is a DTensor. DTensor's module is looked up, not imported:
    none can exist before something imports it, and importing it (with sympy) costs
    about a second of CPU on every rank of a run whose strategies never use it."""
    dtensor = sys.modules.get("torch.distributed.tensor")
    return dtensor is not None and any(issubclass(t, dtensor.DTensor) for t in types)

GEMMS = {aten.mm.default: "mm", aten.addmm.default: "addmm", aten.bmm.default: "bmm",
         aten.baddbmm.default: "baddbmm"}
# collective operator -> kind: PyTorch's c10d operators (what torch.distributed calls) and
# the functional ones (what DTensor calls); their waits and wrappers are not collectives
COLLECTIVES = {
    "c10d.allreduce_": "all_reduce", "c10d.allreduce_coalesced_": "all_reduce",
    "c10d._allgather_base_": "all_gather", "c10d.allgather_": "all_gather",
    "c10d.allgather_into_tensor_coalesced_": "all_gather",
    "c10d._reduce_scatter_base_": "reduce_scatter", "c10d.reduce_scatter_": "reduce_scatter",
    "c10d.reduce_scatter_tensor_coalesced_": "reduce_scatter",
    "c10d.broadcast_": "broadcast", "c10d.alltoall_base_": "all_to_all",
    "c10d.send": "send", "c10d.recv_": "recv",
    "_c10d_functional.all_reduce": "all_reduce", "_c10d_functional.all_reduce_": "all_reduce",
    "_c10d_functional.all_gather_into_tensor": "all_gather",
    "_c10d_functional.reduce_scatter_tensor": "reduce_scatter",
    "_c10d_functional.all_to_all_single": "all_to_all",
    "_c10d_functional.broadcast": "broadcast",
}


def _tensors(x: Any) -> list[torch.Tensor]:
    """The tensors in an operator's arguments or result, as tree_leaves finds them in what
    an operator passes (tuples - named, or a structseq -, lists, dicts, deques), without
    pytree's lookup of every node's type: the census calls it on every operator."""
    if isinstance(x, torch.Tensor):
        return [x]
    found: list[torch.Tensor] = []
    todo = [x]
    while todo:
        node = todo.pop()
        if isinstance(node, torch.Tensor):
            found.append(node)
        elif isinstance(node, (tuple, list, deque)):
            todo.extend(node)
        elif isinstance(node, dict):
            todo.extend(node.values())
    return found


def _bytes(x: Any) -> int:
    return sum(t.numel() * t.element_size() for t in _tensors(x))


def _layout(t: torch.Tensor) -> str:
    """'n' row-major, 't' a transposed row-major matrix (what backward's t() hands mm)."""
    return "t" if t.dim() >= 2 and t.stride(-2) == 1 and t.stride(-1) != 1 else "n"


def gemm_key(name: str, a: torch.Tensor, b: torch.Tensor) -> tuple:
    """(op, a shape, a layout, b shape, b layout, dtype): what a probe needs to redo it."""
    return (name, tuple(a.shape), _layout(a), tuple(b.shape), _layout(b),
            str(a.dtype).removeprefix("torch."))


def attention_key(name: str, q: torch.Tensor) -> tuple:
    """(forward|backward, q shape (B, heads, T, head dim), dtype)."""
    return ("backward" if "backward" in name else "forward", tuple(q.shape),
            str(q.dtype).removeprefix("torch."))


def _phase() -> dict[str, Any]:
    return {"gemm": defaultdict(int), "attention": defaultdict(int), "ops": 0, "views": 0,
            "bytes": 0, "dtensor_ops": 0}


class _Mode(TorchDispatchMode):
    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        """No: nothing the lab runs is compiled. Yes (PyTorch's default) wraps the mode's
        __torch_dispatch__ in torch._disable_dynamo, whose first call imports torch._dynamo
        - seconds of CPU, with sympy and inductor, on every rank (docs/PERFORMANCE.md)."""
        return False


class OpCensus(_Mode):
    def __init__(self, phase_of: Callable[[], str] = lambda: "step") -> None:
        super().__init__()
        self.phase_of = phase_of
        self.phases: dict[str, dict[str, Any]] = defaultdict(_phase)
        self.collectives: dict[str, dict[str, int]] = {}
        self._computed = True  # a step opens with compute (the previous step's, at least)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if is_dtensor(types):
            self.phases[self.phase_of()]["dtensor_ops"] += 1
            return NotImplemented  # DTensor desugars, and the mode sees what it runs
        out = func(*args, **kwargs)
        if any(t is not torch.Tensor and not issubclass(t, torch.nn.Parameter)
               for t in types):
            return out  # fake tensors: sharding propagation, nothing runs
        self._record(func, args, kwargs, out)
        return out

    def _record(self, func, args: tuple, kwargs: dict, out: Any) -> None:
        name = f"{func.namespace}.{func._schema.name.split('::')[-1]}"
        if name in COLLECTIVES:
            # S is the largest side: the output of an all_gather, the input of a
            # reduce_scatter, the tensor itself for the others
            first = args[0] if args else None
            second = args[1] if len(args) > 1 else None
            size = max(_bytes(first), _bytes(second), _bytes(out))
            c = self.collectives.setdefault(COLLECTIVES[name],
                                            {"bytes": 0, "count": 0, "largest": 0})
            c["bytes"] += size
            c["count"] += 1
            c["largest"] = max(c["largest"], size)
            # per group size: a mesh's 2-rank all-reduce is not the world's (the probes
            # calibrate a link per collective and group size)
            ranks = group_size(args)
            by_size = c.setdefault("largest_by_size", {})
            by_size[ranks] = max(by_size.get(ranks, 0), size)
            calls = c.setdefault("count_by_size", {})
            calls[ranks] = calls.get(ranks, 0) + 1
            after = c.setdefault("after_compute_by_size", {})
            after[ranks] = after.get(ranks, 0) + int(self._computed)
            self._computed = False
            return
        if func.namespace in ("c10d", "_c10d_functional"):
            return  # waits, barriers, autograd wrappers: no data of their own
        phase = self.phases[self.phase_of()]
        if func in GEMMS:
            a, b = (args[1], args[2]) if func in (aten.addmm.default,
                                                  aten.baddbmm.default) else args[:2]
            phase["gemm"][gemm_key(GEMMS[func], a, b)] += 1
            self._computed = True
        elif "scaled_dot_product" in name:
            phase["attention"][attention_key(name, args[0])] += 1
            self._computed = True
        elif func.is_view:
            phase["views"] += 1
        else:
            phase["ops"] += 1
            phase["bytes"] += _bytes((args, kwargs)) + _bytes(out)

    def profile(self) -> dict[str, Any]:
        """Plain data (picklable, gathered to rank 0)."""
        return {"phases": {k: {**v, "gemm": dict(v["gemm"]), "attention": dict(v["attention"])}
                           for k, v in self.phases.items()},
                "collectives": {k: dict(v) for k, v in self.collectives.items()}}


# id(storage) -> weak ref, for the tensors alive when freeze_startup() ran
_FROZEN_STORAGE: dict[int, Any] = {}


def freeze_startup() -> None:
    """Move every object alive now into the collector's permanent generation
    (``gc.freeze``): torch and the strategies' modules are hundreds of thousands of
    objects that live as long as the process, and the memory measurement walks the
    collector's objects (LiveStorage) and collects garbage (training.release) before each
    strategy, a noticeable CPU cost on every rank while they are there (training.run imports
    its strategies' modules before this runs). The tensors among the frozen objects are
    recorded, since ``gc.get_objects()`` no longer lists them."""
    _FROZEN_STORAGE.update(_tensor_storages())
    gc.freeze()


def _tensor_storages() -> dict[int, Any]:
    """id(storage) -> weak ref, for every tensor the collector lists (not frozen ones)."""
    found = {}
    for obj in gc.get_objects():
        if type(obj) in (torch.Tensor, torch.nn.Parameter):
            st = obj.untyped_storage()
            found[id(st)] = weakref.ref(st)
    return found


class LiveStorage(_Mode):
    """Bytes of tensor storage alive on CPU, and their peak, over a window: every storage
    an operator hands out is followed until it dies - through a weak reference, so that
    a storage freed by another thread counts too (gloo's workers drop what their
    collectives held; a profiler's allocator records, kept per thread, miss those frees).
    FSDP2 frees and re-allocates its unsharded parameters by resizing their storage in
    place, which no operator (and so no dispatch mode) sees: for the window,
    UntypedStorage.resize_ reports to the meter too. Storage that was alive before the
    window (the batch, the calibration's tensors) is left out even when an operator
    hands out a view of it. ``mark()`` starts the measured part: ``start_bytes`` is what
    was alive then, ``peak_bytes`` the most alive after. Allocations inside one kernel
    (its workspace) are not operators' outputs: not seen."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._live: dict[int, tuple[Any, int]] = {}  # id(storage) -> (weak ref, bytes)
        self.current = self.peak_bytes = 0
        self.start_bytes: int | None = None
        self._resize = None
        self._before: dict[int, Any] = {}  # id(storage) -> weak ref: alive before the window

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if is_dtensor(types):
            return NotImplemented  # the local tensors it runs on are what is allocated
        out = func(*args, **(kwargs or {}))
        for t in _tensors(out):
            if type(t) is torch.Tensor or isinstance(t, torch.nn.Parameter):
                self.track(t.untyped_storage())
        return out

    def track(self, st: torch.UntypedStorage) -> None:
        before = self._before.get(id(st))
        if st.device.type == "meta" or (before is not None and before() is st):
            return
        key, size = id(st), st.nbytes()
        with self._lock:
            known = self._live.get(key)
            if known is None:
                self._live[key] = (weakref.ref(st, lambda _ref, k=key: self._gone(k)), size)
                self.current += size
            elif known[1] != size:  # resized in place
                self._live[key] = (known[0], size)
                self.current += size - known[1]
            self.peak_bytes = max(self.peak_bytes, self.current)

    def _gone(self, key: int) -> None:
        with self._lock:
            _, size = self._live.pop(key, (None, 0))
            self.current -= size

    def mark(self) -> None:
        with self._lock:
            self.start_bytes = self.peak_bytes = self.current

    def __enter__(self) -> LiveStorage:
        self._before = {**_FROZEN_STORAGE, **_tensor_storages()}
        original = torch.UntypedStorage.resize_
        meter = self

        def resize_(st: torch.UntypedStorage, size: int) -> torch.UntypedStorage:
            out = original(st, size)
            meter.track(st)
            return out

        self._resize, torch.UntypedStorage.resize_ = original, resize_
        return super().__enter__()

    def __exit__(self, *exc: Any) -> None:
        super().__exit__(*exc)
        torch.UntypedStorage.resize_ = self._resize
