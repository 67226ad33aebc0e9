"""What every strategy offers the experiment loop: a training step, the pieces of
gradient, parameter and optimizer state it holds (for the correctness gate), the
order its schedule must run in (pipelines), and its cost-model predictions: the
bytes it communicates, its step time (priced from the census of its own step) and
its memory at the step's peak, with the buffers it holds named.

A strategy keeps the module this rank trains in ``self.model`` and its optimizer in
``self.opt``; the defaults below read those, so a strategy overrides a piece or the
model-state count only where it really holds something else (ZeRO's shards, TP's
slices, DP's bucket buffers)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import nn

from jobs.lab.components.census import is_dtensor
from jobs.lab.components.context import Context
from jobs.lab.components.model import Batch, ModelConfig, loss_fn
from jobs.lab.components.optim import make_optimizer, state_of
from jobs.lab.predict import calibration, cost, experts, memory


@dataclass(frozen=True)
class TrainSpec:
    cfg: ModelConfig
    batch_size: int  # global sequences per optimizer step
    micro_batches: int = 1
    bucket_cap_mb: float = 0.25
    precision: str = "fp32_sgd"  # jobs/lab/components/optim.py
    # the run's resolved parameters, for what a strategy of a combined experiment reads
    # beyond these (the mesh's tp, pp, ranks_per_node ...); not part of equality
    params: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def e(self) -> int:
        """Bytes per element of weights, gradients and activations."""
        return memory.element_bytes(self.precision)

    @property
    def cap_elems(self) -> int:
        """The bucket cap in elements (DDP's cap is in bytes: the same buckets)."""
        return max(1, int(self.bucket_cap_mb * 2**20) // self.e)

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


def _full(t: torch.Tensor | None) -> torch.Tensor | None:
    """A DTensor (FSDP2, DTensor TP) gathered whole - a collective, so every rank asks in
    the same order."""
    return t.full_tensor() if t is not None and is_dtensor((type(t),)) else t


def pieces_of(p: nn.Parameter, name: str, what: str, opt: Any, precision: str,
              select: Callable | None = None) -> list[Piece]:
    """A parameter's gradient, value or optimizer state ("grad", "param", "state": SGD's
    momentum, named like the parameter; AdamW's moments, named <parameter>.exp_avg and
    <parameter>.exp_avg_sq)."""
    if what == "grad":
        return [Piece(name, _full(p.grad), select)]
    if what == "param":
        return [Piece(name, _full(p.data), select)]
    return [Piece(name + suffix, _full(t), select) for suffix, t in state_of(opt, p, precision)]


def local_pieces(model: nn.Module, what: str, prefix: str = "", opt: Any = None,
                 precision: str = "fp32_sgd") -> list[Piece]:
    """Every parameter's gradient, value or optimizer state as the reference sees it."""
    out = []
    for name, p in model.named_parameters():
        name = name[len(prefix):] if prefix and name.startswith(prefix) else name
        out += pieces_of(p, name, what, opt, precision)
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
    # a wrapper that runs Python of its own around the operators (FSDP2's hooks, DTensor's
    # redistributions): the run probes it on the strategy itself (experiments/hooks.py)
    hook_probe: ClassVar[bool] = False
    # what the step-time model knows it leaves out (the card shows it beside the residual)
    unmodelled: ClassVar[tuple[str, ...]] = (
        "Python between the operators beyond the probe's average (hooks, the step's code)",)
    model: nn.Module
    opt: torch.optim.Optimizer | None

    def __init__(self, ctx: Context, spec: TrainSpec) -> None:
        self.ctx, self.spec = ctx, spec
        self.precision = spec.precision

    def optimizer(self, params: list[nn.Parameter]) -> Any:
        return make_optimizer(params, self.precision)

    # -- training
    def train_step(self, batch: Batch) -> StepOut:
        raise NotImplementedError

    def one_step(self, local: Batch, forward: Callable | None = None,
                 after_backward: Callable[[], None] | None = None, *,
                 before_backward: Callable[[], None] | None = None,
                 divide_by: int = 1) -> torch.Tensor:
        """The step of a strategy that takes its batch as one micro-batch: zero the
        gradients, forward (the model's, or `forward`), `before_backward`, backward (of the
        loss over `divide_by`: 1/d of the global mean, where d replicas' gradients are
        summed), the strategy's own exchange of gradients (`after_backward`), the
        optimizer; each phase a span of the timeline. The loss, detached."""
        tl = self.ctx.timeline
        self.opt.zero_grad(set_to_none=True)
        with tl.span("forward", mb=0):
            loss = loss_fn(self.spec.cfg.kind)((forward or self.model)(local.inputs),
                                               local.targets)
        if before_backward is not None:
            before_backward()
        with tl.span("backward", mb=0):
            (loss / divide_by if divide_by != 1 else loss).backward()
        if after_backward is not None:
            after_backward()
        with tl.span("optimizer"):
            self.opt.step()
        return loss.detach()

    # -- correctness gate
    def grad_pieces(self) -> list[Piece]:
        return local_pieces(self.model, "grad", self.name_prefix)

    def param_pieces(self) -> list[Piece]:
        return local_pieces(self.model, "param", self.name_prefix)

    def state_pieces(self) -> list[Piece]:
        """The optimizer state this rank holds (momentum; Adam's moments): after several
        steps it is what tells an optimizer that keeps its state from one that forgets it."""
        return local_pieces(self.model, "state", self.name_prefix, self.opt, self.precision)

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

    def overlap_s(self, cal: calibration.Calibration, compute: list[dict]) -> float:
        """Communication hidden behind computation (none unless a strategy says so)."""
        return 0.0

    def backward_overlap(self, compute: list[dict], comm_s: float, last_s: float) -> float:
        """What bucketed gradient communication hides on a GPU: it runs beside the last
        micro-batch's backward only (the others skip the sync), and the last bucket -
        ready when backward ends - never hides. On CPU gloo's threads compete with the
        compute for the same cores, so nothing is assumed hidden."""
        if not self.ctx.is_cuda:
            return 0.0
        window = max(sum(c.get("backward", {}).values()) for c in compute)
        return max(0.0, min(window / self.micro_batches(), comm_s - last_s))

    def predict(self, cal: calibration.Calibration, compute: list[dict]) -> dict[str, Any]:
        """Step time from every rank's census, priced (compute[r]: phase -> terms)."""
        terms = dict.fromkeys(k for c in compute for ph in c.values() for k in ph)
        totals = [{k: sum(ph.get(k, 0.0) for ph in c.values()) for k in terms}
                  for c in compute]
        return cost.predict_flat(totals, self.priced_comm(cal),
                                      self.overlap_s(cal, compute))

    def priced_comm(self, cal: calibration.Calibration) -> float:
        """Seconds of this rank's collectives a step, each over the world's link (a mesh
        prices each dimension over its own group's)."""
        return cal.comm(self.predicted_comm() or {})

    def predicted_memory(self) -> dict[str, Any]:
        """The step's peak on this rank: memory.peak(held, moments), and the model
        state formula (``model_state``)."""
        raise NotImplementedError

    # -- what every full-model replica holds (DP, ZeRO, FSDP2 and the reference)
    def micro_batches(self) -> int:
        return self.spec.micro_batches

    def local_tokens(self) -> int:
        """Tokens one micro-batch of this rank runs."""
        return self.spec.tokens // (self.ctx.world * self.micro_batches())

    def peak_memory(self, *, stage: int = 0, P: float | None = None, t: int = 1,
                    in_flight: int = 1, first: bool = True, last: bool = True,
                    buffers: dict[str, float] | None = None,
                    start: dict[str, float] | None = None,
                    later: dict[str, float] | None = None,
                    end: dict[str, float] | None = None,
                    optimizer: dict[str, float] | None = None,
                    grads_held: bool = False) -> dict[str, Any]:
        """The step's peak on this rank, holding P parameters (the whole model unless
        given; ZeRO `stage` sharding over the ranks) and its blocks split t ways: the
        state held throughout, plus the largest moment of backward (predict/memory.py's doc) -
        the first micro-batch's, with `in_flight` micro-batches of local_tokens() held
        (first/last: with the embedding's, the head's and the loss's activations) and
        `start`'s buffers; a later micro-batch's (m > 1), with the gradients and the
        micro-batches still held - `in_flight` if more follow, else one fewer - and
        `later`'s buffers; the end, with the gradients and `end`'s buffers; the
        optimizer's step, with `optimizer`'s buffers (and, for AdamW, one update's fp32
        gradient and denominator: 8 bytes an element of largest_update()).
        Gradients that live in a persistent buffer (ZeRO-2's shards) are held instead."""
        c, e, d, m = self.spec.cfg, self.spec.e, self.ctx.world, self.micro_batches()
        P = c.param_count() if P is None else P
        n, k, h = self.local_tokens(), in_flight, c.hidden
        state = memory.model_state(self.precision, P, stage=stage, d=d)
        held = {"params": state["params"], "optimizer": state["optimizer"], **(buffers or {})}
        grads = {"grads": state["grads"]}
        if grads_held:
            held.update(grads)
            grads = {}
        # on CPU the batch moves to the "device" without a copy: the embedding saves the
        # caller's tensor, which is not the strategy's memory (on CUDA it is a copy)
        one = memory.activations(c.kind, len(self.local_layers()), n, h, c.heads,
                                      c.vocab, e, t=t, first=first, last=last,
                                      inputs=self.ctx.is_cuda)
        work = memory.backward_working_set(n, h, e, t)
        if c.experts:  # mixture-of-experts MLPs save their capacity buffers (experts.py)
            one += len(self.local_layers()) * experts.block_activation_delta(
                n, h, c.experts, c.top_k, c.capacity_factor, c.seq_len, e)
            work = experts.backward_working_set(n, h, c.experts, c.top_k,
                                                c.capacity_factor, c.seq_len, e)
        moments = {"backward end": {**grads, **(end or {})}}
        adamw = {"AdamW temporaries": 8 * self.largest_update()} \
            if self.precision == "bf16_adamw" else {}
        if optimizer or adamw:
            moments["optimizer step"] = {**({} if stage == 1 else grads), **(optimizer or {}),
                                         **adamw}
        if last:
            head = memory.finish_activations(c.kind, n, h, c.vocab, e, self.ctx.is_cuda)
            moments["loss backward"] = {
                "activations": k * one, **(start or {}),
                "loss gradient": memory.loss_gradient(c.kind, n, h, c.vocab, e)}
            moments["first block backward"] = {
                "activations": k * one - head, **(start or {}), "working set": work,
                "head gradients": memory.finish_params(c.kind, h, c.vocab)
                * memory.RECIPES[self.precision]["grad"]}
        else:
            moments["first block backward"] = {"activations": k * one, **(start or {}),
                                               "working set": work}
        if m > 1:
            again = k if m > k else m - 1
            moments["later backward"] = {**grads, "activations": again * one,
                                         **(later or {}), "working set": work}
        return {**memory.peak(held, moments), "model_state": state,
                "activations": k * one, "one_micro_batch_activations": one}

    def local_layers(self) -> range:
        return range(self.spec.cfg.layers)

    def largest_update(self) -> int:
        """Elements of the largest tensor the optimizer updates at once."""
        return max((getattr(p, "_local_tensor", p).numel() for p in self.parameters()),
                   default=0)

    def extra(self) -> dict[str, Any]:
        """Strategy-specific measurements (in-flight micro-batches, buckets ...)."""
        return {}
