"""Activation recomputation by hand (Chen et al. 2016; Korthikanti et al. 2022).

Backward needs what forward computed. :class:`Recompute` is an autograd.Function that
runs a piece of the model under no_grad - nothing inside it is saved - and keeps only
the piece's inputs (``save_for_backward``; and the RNG state when the piece has dropout,
so that the rerun draws the same masks). In backward it runs the piece again with grad
enabled, from detached copies of the inputs, and back-propagates through that rebuilt
graph (a nested backward: parameter gradients accumulate as usual), returning the
inputs' gradients. Two policies:

- full: the piece is a whole transformer (or MLP) block; only its input is kept, and
  backward costs one more forward of every block (about a third more compute);
- selective (Megatron's): the piece is the attention core softmax(QK^T/sqrt(d))V only,
  rebuilt from q, k and v, which the projections' outputs keep anyway. The model's core is
  a fused SDPA kernel that keeps no s^2 matrix (it rebuilds it inside its own backward),
  so what selective saves here is only the kernel's log-sum-exp (recompute.py).

The GPT model has no dropout, so no RNG state is kept (``has_dropout``); the mechanism is
tested on a block with dropout (tests/jobs/lab/test_lab_recompute.py). With world_size > 1
the strategies are data parallel: each rank runs 1/d of the batch and the gradients are
all-reduced after backward, one tensor at a time (dp_naive's bytes).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from jobs.lab.components.instrument import SavedActivations
from jobs.lab.components.model import Batch
from jobs.lab.predict import cost, recompute
from jobs.lab.strategies.base import StepOut
from jobs.lab.strategies.data_parallel import DataParallelNaive


def has_dropout(model: nn.Module) -> bool:
    return any(isinstance(m, nn.Dropout) and m.p > 0 for m in model.modules())


def rng_state(device: torch.device) -> tuple[torch.Tensor, torch.Tensor | None]:
    cuda = torch.cuda.get_rng_state(device) if device.type == "cuda" else None
    return torch.get_rng_state(), cuda


@contextlib.contextmanager
def restored_rng(state: tuple | None, device: torch.device):
    """The RNG as it was when `state` was taken, for the block; as it is, after it."""
    if state is None:
        yield
        return
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.set_rng_state(state[0])
        if state[1] is not None:
            torch.cuda.set_rng_state(state[1], device)
        yield


class Recompute(torch.autograd.Function):
    """fn(*inputs), keeping only the inputs; fn runs again inside backward."""

    @staticmethod
    def forward(ctx: Any, fn: Callable, preserve_rng: bool, *inputs: torch.Tensor):
        ctx.fn = fn
        ctx.device = inputs[0].device
        ctx.rng = rng_state(ctx.device) if preserve_rng else None
        ctx.save_for_backward(*inputs)
        return fn(*inputs)  # grad is off in forward: fn's intermediates are not kept

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor):
        inputs = [x.detach().requires_grad_(x.requires_grad) for x in ctx.saved_tensors]
        with torch.enable_grad(), restored_rng(ctx.rng, ctx.device):
            out = ctx.fn(*inputs)
        torch.autograd.backward(out, grad)
        return (None, None, *(x.grad for x in inputs))


def recomputed(fn: Callable, *inputs: torch.Tensor, preserve_rng: bool = False):
    return Recompute.apply(fn, preserve_rng, *inputs)


def attention_core(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """softmax(QK^T/sqrt(d) + causal mask) V: the part whose memory grows with s^2."""
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def block_forward(blk: nn.Module, x: torch.Tensor,
                  core: Callable = attention_core) -> torch.Tensor:
    """model.Block's forward, operator for operator, with the attention core given."""
    if not hasattr(blk, "attn"):  # the MLP stack's block: no attention
        return blk(x)
    a = blk.attn
    B, T, _ = x.shape
    y = blk.ln1(x)
    y = core(a.heads_of(y, a.q), a.heads_of(y, a.k), a.heads_of(y, a.v))
    x = x + a.proj(y.transpose(1, 2).reshape(B, T, -1))
    return x + blk.mlp(blk.ln2(x))


class RecomputeFull(DataParallelNaive):
    """Full recomputation by hand: each block's input kept, the block rerun in backward."""

    name = "recompute_full"
    label = "full recomputation by hand (block input kept)"
    policy = "full"
    rebuilt_output = True  # the nested backward starts from the rebuilt block's output

    def __init__(self, ctx, spec) -> None:
        super().__init__(ctx, spec)
        self.preserve_rng = has_dropout(self.model)
        self.kept_after_forward: int | None = None

    def block(self, blk: nn.Module, x: torch.Tensor) -> torch.Tensor:
        return recomputed(functools.partial(block_forward, blk), x,
                          preserve_rng=self.preserve_rng)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        m = self.model
        x = m.embed(inputs)
        for blk in m.blocks.values():
            x = self.block(blk, x)
        return m.finish(x)

    def train_step(self, batch: Batch) -> StepOut:
        ctx = self.ctx
        local = batch.split(ctx.world)[ctx.rank].to(ctx.device)  # (B/d, T)
        # the recomputed forwards run inside the backward span
        loss = self.one_step(local, self.forward,
                             self.sync_gradients if ctx.world > 1 else None,
                             before_backward=self.note_kept_after_forward)
        return StepOut(loss, 1.0 / ctx.world)

    def note_kept_after_forward(self) -> None:
        """The memory step's meter: what forward left for backward."""
        meter = SavedActivations.active
        self.kept_after_forward = meter.current if meter is not None else None

    def micro_batches(self) -> int:
        return 1

    def predicted_comm(self):
        if self.ctx.world == 1:
            return {}
        return cost.dp_comm(self.numels(), self.spec.e, "dp_naive", self.spec.cap_elems)

    def memory_for(self, policy: str, rebuilt_output: bool = False) -> dict:
        c = self.spec.cfg
        return recompute.step_peak(
            self.precision, c.kind, policy, P=c.param_count(), layers=c.layers,
            n=self.local_tokens(), h=c.hidden, heads=c.heads, v=c.vocab, e=self.spec.e,
            inputs=self.ctx.is_cuda, largest_update=self.largest_update(),
            rebuilt_output=rebuilt_output)

    def predicted_memory(self) -> dict:
        return self.memory_for(self.policy, self.rebuilt_output)

    def extra(self) -> dict:
        c, n = self.spec.cfg, self.local_tokens()
        mine, none = self.predicted_memory(), self.memory_for("none")
        kept = {p: recompute.kept_per_block(c.kind, p, n, c.hidden, c.heads,
                                                    self.spec.e) for p in ("none", self.policy)}
        return {"policy": self.policy, "rng_state_kept": self.preserve_rng,
                "kept_after_forward_bytes": self.kept_after_forward,
                "predicted_kept_after_forward_bytes": mine["activations"],
                "kept_per_block_bytes": kept[self.policy],
                "kept_per_block_without_bytes": kept["none"],
                "predicted_activations_saved_bytes": recompute.saved(
                    c.kind, self.policy, c.layers, n, c.hidden, c.heads, self.spec.e),
                "predicted_peak_saved_bytes": none["total"] - mine["total"],
                "recomputed": recompute.recompute_forwards(c.kind, self.policy,
                                                                  c.layers)}


class RecomputeSelective(RecomputeFull):
    """Megatron's selective recomputation by hand: only the attention core is rerun."""

    name = "recompute_selective"
    label = "selective recomputation by hand (attention core rerun)"
    policy = "selective"
    rebuilt_output = False

    def core(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return recomputed(attention_core, q, k, v, preserve_rng=self.preserve_rng)

    def block(self, blk: nn.Module, x: torch.Tensor) -> torch.Tensor:
        return block_forward(blk, x, self.core)
