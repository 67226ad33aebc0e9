"""What every strategy offers the experiment loop: a training step, the pieces of
gradient, parameter and optimizer state it holds (for the correctness gate), the
order its schedule must run in (pipelines), its model-state bytes and its cost-model
prediction.

A strategy keeps the module this rank trains in ``self.model`` and its optimizer in
``self.opt``; the defaults below read those, so a strategy overrides a piece or the
model-state count only where it really holds something else (ZeRO's shards, TP's
slices, DP's bucket buffers)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn
from torch.distributed.tensor import DTensor

from jobs.lab import costmodel
from jobs.lab.model import Batch, ModelConfig
from jobs.lab.runtime import Context

LR, MOMENTUM = 0.05, 0.9


@dataclass(frozen=True)
class TrainSpec:
    cfg: ModelConfig
    batch_size: int  # global sequences per optimizer step
    micro_batches: int = 1
    bucket_cap_mb: float = 0.25

    @property
    def cap_elems(self) -> int:
        return max(1, int(self.bucket_cap_mb * 2**20) // 4)

    @property
    def tokens(self) -> int:
        return self.batch_size * self.cfg.seq_len

    def flops(self, tokens: int | None = None) -> float:
        return self.cfg.flops_per_token() * (self.tokens if tokens is None else tokens)


@dataclass
class Piece:
    """A local tensor that must equal ``select(reference)`` (the whole reference
    tensor when select is None) - a shard, a slice or the full thing."""

    name: str
    tensor: torch.Tensor | None
    select: Callable[[torch.Tensor], torch.Tensor] | None = None


@dataclass
class StepOut:
    # this rank's share, weighted so that the shares sum to the global mean; a tensor is
    # fine (and on CUDA better: .item() would make every step wait for the device)
    loss: float | torch.Tensor
    weight: float


def sgd(params: list[nn.Parameter]) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=LR, momentum=MOMENTUM)


def piece_of(p: nn.Parameter, what: str, opt: torch.optim.Optimizer | None) -> torch.Tensor | None:
    """A parameter's gradient, value or optimizer state ("grad", "param", "state": SGD's
    momentum buffer). A DTensor (FSDP2, DTensor TP) is gathered whole, which is a
    collective, so every rank asks in the same order."""
    if what == "grad":
        t = p.grad
    elif what == "param":
        t = p.data
    else:
        t = (opt.state.get(p) or {}).get("momentum_buffer") if opt is not None else None
    return t.full_tensor() if isinstance(t, DTensor) else t


def local_pieces(model: nn.Module, what: str, prefix: str = "",
                 opt: torch.optim.Optimizer | None = None) -> list[Piece]:
    """Every parameter's gradient, value or optimizer state as the reference sees it."""
    out = []
    for name, p in model.named_parameters():
        name = name[len(prefix):] if prefix and name.startswith(prefix) else name
        out.append(Piece(name, piece_of(p, what, opt)))
    return out


def optimizer_state_bytes(opt: torch.optim.Optimizer) -> int:
    total = 0
    for state in opt.state.values():
        for v in state.values():
            if isinstance(v, torch.Tensor):
                total += _local(v).numel() * v.element_size()
    return total


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if hasattr(t, "to_local") else t


def model_state(params: list[torch.Tensor], opt: torch.optim.Optimizer | None,
                extra_grad_bytes: int = 0) -> dict[str, int]:
    p = sum(_local(x).numel() * x.element_size() for x in params)
    g = sum(_local(x.grad).numel() * x.grad.element_size() for x in params
            if x.grad is not None) + extra_grad_bytes
    o = optimizer_state_bytes(opt) if opt is not None else 0
    return {"params": p, "grads": g, "optimizer": o, "total": p + g + o}


class Strategy:
    name: ClassVar[str] = ""
    label: ClassVar[str] = ""
    builtin: ClassVar[bool] = False  # PyTorch's own implementation
    instrumented: ClassVar[bool] = True  # its collectives go through ctx.comm
    ranks_active: ClassVar[str] = "all"  # "all" or "rank0" (single-device baseline)
    # what a wrapper adds to parameter names ("module." for DDP), stripped so that they
    # are the reference's names
    name_prefix: ClassVar[str] = ""
    model: nn.Module
    opt: torch.optim.Optimizer | None

    def __init__(self, ctx: Context, spec: TrainSpec) -> None:
        self.ctx, self.spec = ctx, spec

    # -- training
    def train_step(self, batch: Batch) -> StepOut:
        raise NotImplementedError

    # -- correctness gate
    def grad_pieces(self) -> list[Piece]:
        return local_pieces(self.model, "grad", self.name_prefix)

    def param_pieces(self) -> list[Piece]:
        return local_pieces(self.model, "param", self.name_prefix)

    def state_pieces(self) -> list[Piece]:
        """The optimizer state (momentum) this rank holds: after several steps it is what
        tells an optimizer that keeps its state from one that forgets it."""
        return local_pieces(self.model, "state", self.name_prefix, self.opt)

    def replicated(self) -> list[tuple[Any, list[tuple[str, torch.Tensor]]]]:
        """(process group, named tensors) that must be bit-identical across that group
        (None: ctx.group, every rank)."""
        return []

    def expected_order(self) -> list[tuple[str, int]] | None:
        """The (forward|backward, micro-batch) sequence this rank's step must record, or
        None when the order is not this strategy's to keep (PyTorch's own schedules)."""
        return None

    # -- measurement and prediction
    def parameters(self) -> list[torch.Tensor]:
        return list(self.model.parameters())

    def model_state(self) -> dict[str, int]:
        return model_state(self.parameters(), self.opt)

    def predicted_comm(self) -> dict[str, dict[str, Any]] | None:
        """Bytes (and calls) per optimizer step on this rank, by collective kind."""
        return {}

    def predict(self, cal: costmodel.Calibration) -> dict[str, Any]:
        raise NotImplementedError

    def predicted_memory(self) -> dict[str, float]:
        raise NotImplementedError

    def extra(self) -> dict[str, Any]:
        """Strategy-specific measurements (in-flight micro-batches, buckets ...)."""
        return {}
