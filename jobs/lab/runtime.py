"""Process-group setup and the per-rank context every experiment receives.

Runs inside a torchrun worker. The backend follows the device: nccl with one GPU
per rank, gloo on CPU. The collective timeout is short (COMMONPLACE_LAB_PG_TIMEOUT,
default 60 s) so that a deadlocked collective fails in seconds, not 30 minutes.
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

from jobs.lab.contract import progress_line
from jobs.lab.instrument import Comm, Timeline


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
    stdout: Any = field(default=sys.stdout, repr=False)

    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"

    def sync(self) -> None:
        if self.is_cuda:
            torch.cuda.synchronize(self.device)

    def log(self, msg: str) -> None:
        if self.rank == 0:
            say(msg, self.stdout)

    def progress(self, step: int, total: int, **fields: Any) -> None:
        """The machine-readable line callers parse (jobs/lab/contract.py owns its format)."""
        if self.rank == 0:
            shown = {k: _fmt(v) for k, v in fields.items() if v is not None}
            say(progress_line(step, total, shown), self.stdout)

    def gather(self, obj: Any) -> list[Any]:
        """Every rank's object, on every rank (uncounted: bookkeeping, not the experiment).
        dist.all_gather_object needs numpy; this needs only pickle."""
        payload = pickle.dumps(obj)
        data = torch.frombuffer(bytearray(payload), dtype=torch.uint8)
        sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(self.world)]
        dist.all_gather(sizes, torch.tensor([data.numel()], dtype=torch.int64))
        longest = max(int(s.item()) for s in sizes)
        padded = torch.zeros(longest, dtype=torch.uint8)
        padded[: data.numel()] = data
        bufs = [torch.empty(longest, dtype=torch.uint8) for _ in range(self.world)]
        dist.all_gather(bufs, padded)
        return [pickle.loads(ctypes.string_at(b.data_ptr(), int(n.item())))
                for b, n in zip(bufs, sizes, strict=True)]

    def barrier(self) -> None:
        dist.barrier()


def say(line: str, stream: Any = None) -> None:
    """One write per line, so lines of different ranks never interleave mid-line."""
    stream = stream or sys.stdout
    stream.write(line + "\n")
    stream.flush()


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def init(device_name: str) -> Context:
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS", "1"))))
    timeout = timedelta(seconds=float(os.environ.get("COMMONPLACE_LAB_PG_TIMEOUT", "60")))
    if device_name == "cuda":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device = torch.device("cpu")
        backend = "gloo"
    if "MASTER_ADDR" not in os.environ:  # a single process started without torchrun
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
    dist.init_process_group(backend=backend, rank=rank, world_size=world, timeout=timeout,
                            device_id=device if backend == "nccl" else None)
    dist.barrier()
    timeline = Timeline(rank)  # origin taken just after a barrier: one clock for all ranks
    ctx = Context(rank, world, device, backend, timeline, Comm(timeline), out_dir="")
    ctx.comm._sync = ctx.sync
    return ctx


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
        "device": device_name,
        "cpu_count": os.cpu_count(),
        "threads_per_rank": torch.get_num_threads(),
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
