"""Process-group setup and the per-rank context every experiment receives.

Runs inside a torchrun worker. The backend follows the device: nccl with one GPU
per rank, gloo on CPU. The collective timeout is short (COMMONPLACE_LAB_PG_TIMEOUT,
default 60 s) so that a deadlocked collective fails in seconds, not 30 minutes.

Two groups, because nccl carries only CUDA tensors: ``ctx.group`` is where the
experiment's tensors travel (the device's backend), ``ctx.cpu_group`` is where the
lab's own bookkeeping travels (pickled reports, loss shares, timings, barriers: CPU
tensors, always gloo). COMMONPLACE_LAB_PG_BACKEND replaces the default group's
backend string; the tests set it to "cuda:gloo" - gloo restricted to CUDA tensors,
as nccl is - so that any CPU tensor sent without naming a group fails on CPU too.
"""

from __future__ import annotations

import ctypes
import os
import pickle
import platform
import socket
import sys
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh

from base.contract import progress_line
from jobs.lab.components import clocks
from jobs.lab.components.instrument import Comm, Timeline


class Unsupported(RuntimeError):
    """The machine cannot run what was asked (e.g. more ranks than GPUs on nccl)."""


def resolve_device(requested: str, world_size: int) -> str:
    has_cuda = torch.cuda.is_available()
    if requested == "auto":
        requested = "cuda" if has_cuda else "cpu"
    if requested == "cuda":
        if not has_cuda:
            raise Unsupported("device=cuda but no CUDA device is visible")
        if torch.cuda.device_count() < world_size:
            raise Unsupported(
                f"world_size={world_size} needs {world_size} GPUs but "
                f"{torch.cuda.device_count()} are visible; NCCL refuses two ranks on one "
                "GPU - lower world_size or pass device=cpu to run on gloo")
    return requested


@dataclass
class Context:
    rank: int
    world: int
    device: torch.device
    backend: str
    timeline: Timeline
    comm: Comm
    out_dir: str
    group: Any = None  # the experiment's tensors (on self.device)
    cpu_group: Any = None  # the lab's bookkeeping (CPU tensors)
    clock: dict = field(default_factory=dict)  # how this rank's clock meets rank 0's (clocks.py)
    stdout: Any = field(default=sys.stdout, repr=False)

    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"

    def sync(self) -> None:
        if self.is_cuda:
            torch.cuda.synchronize(self.device)

    def mesh(self) -> DeviceMesh:
        """A 1-D device mesh over ctx.group (FSDP2 and DTensor otherwise take the default
        group, which need not carry this device's tensors)."""
        return DeviceMesh.from_group(self.group, self.device.type)

    def log(self, msg: str) -> None:
        if self.rank == 0:
            say(msg, self.stdout)

    def progress(self, step: int, total: int, **fields: Any) -> None:
        """The machine-readable line callers parse (base/contract.py owns its format)."""
        if self.rank == 0:
            shown = {k: _fmt(v) for k, v in fields.items() if v is not None}
            say(progress_line(step, total, shown), self.stdout)

    # -- bookkeeping: CPU tensors over cpu_group, never counted, never on the device
    def gather(self, obj: Any) -> list[Any]:
        """Every rank's object, on every rank. dist.all_gather_object needs numpy (and
        under nccl a CUDA staging tensor); this needs only pickle and gloo."""
        payload = pickle.dumps(obj)
        data = torch.frombuffer(bytearray(payload), dtype=torch.uint8)
        sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(self.world)]
        dist.all_gather(sizes, torch.tensor([data.numel()], dtype=torch.int64),
                        group=self.cpu_group)
        longest = max(int(s.item()) for s in sizes)
        padded = torch.zeros(longest, dtype=torch.uint8)
        padded[: data.numel()] = data
        bufs = [torch.empty(longest, dtype=torch.uint8) for _ in range(self.world)]
        dist.all_gather(bufs, padded, group=self.cpu_group)
        return [pickle.loads(ctypes.string_at(b.data_ptr(), int(n.item())))
                for b, n in zip(bufs, sizes, strict=True)]

    def sum_cpu(self, t: torch.Tensor) -> torch.Tensor:
        """Element-wise sum over ranks of a CPU tensor, in place."""
        dist.all_reduce(t, group=self.cpu_group)
        return t

    def barrier(self) -> None:
        dist.barrier(group=self.cpu_group)


def say(line: str, stream: Any = None) -> None:
    """One write per line, so lines of different ranks never interleave mid-line."""
    stream = stream or sys.stdout
    stream.write(line + "\n")
    stream.flush()


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


NATIVE = {"cuda": "nccl", "cpu": "gloo"}  # the backend of each device type


def init(device_name: str) -> Context:
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS", "1"))))
    timeout = timedelta(seconds=float(os.environ.get("COMMONPLACE_LAB_PG_TIMEOUT", "60")))
    if device_name == "cuda":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    backend = os.environ.get("COMMONPLACE_LAB_PG_BACKEND") or NATIVE[device.type]
    if "MASTER_ADDR" not in os.environ:  # a single process started without torchrun
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
    # device_id: nccl creates its communicator now, not at the first collective (which
    # may be a batch_isend_irecv that not every rank joins)
    dist.init_process_group(backend=backend, rank=rank, world_size=world, timeout=timeout,
                            device_id=device if device.type == "cuda" else None)
    served = devices_served(backend)
    made: dict[str, Any] = {}

    def group_for(device_type: str) -> Any:
        if device_type in served:
            return dist.group.WORLD
        native = NATIVE[device_type]
        if native not in made:  # every rank creates groups in the same order
            made[native] = dist.new_group(backend=native)
        return made[native]

    group, cpu_group = group_for(device.type), group_for("cpu")
    origin, clock = clocks.common_origin(rank, world, cpu_group)  # one clock for all ranks
    timeline = Timeline(rank, origin=origin, device=device)
    return Context(rank, world, device, backend, timeline, Comm(timeline, group, device),
                   out_dir="", group=group, cpu_group=cpu_group, clock=clock)


def devices_served(backend: str) -> set[str]:
    """Device types a backend string carries: "nccl" -> {cuda}, "gloo" -> {cpu, cuda},
    "cpu:gloo,cuda:nccl" -> {cpu, cuda}, "cuda:gloo" -> {cuda}."""
    if ":" in backend:
        return {pair.split(":")[0].strip() for pair in backend.lower().split(",")}
    return set(dist.Backend.backend_capability.get(backend.lower(), ["cpu", "cuda"]))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def environment(ctx: Context | None, device_name: str, world: int) -> dict[str, Any]:
    env: dict[str, Any] = {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "world_size": world,
        "backend": ctx.backend if ctx else ("nccl" if device_name == "cuda" else "gloo"),
        "bookkeeping_backend": "gloo",
        "device": device_name,
        "cpu_count": os.cpu_count(),
        "threads_per_rank": torch.get_num_threads(),
        "clock": clocks.describe(ctx.clock) if ctx else None,
        "cuda": torch.version.cuda,
    }
    if device_name == "cuda" and torch.cuda.is_available():
        env["device_model"] = torch.cuda.get_device_name(0)
        env["gpu_count"] = torch.cuda.device_count()
        try:
            env["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        except Exception:  # noqa: BLE001 - a build without NCCL still reports the rest
            env["nccl"] = None
    else:
        env["device_model"] = platform.processor() or platform.machine()
    return env
