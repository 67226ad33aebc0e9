"""The two training recipes every strategy (and the single-device reference) can run.

``fp32_sgd``: fp32 weights, gradients and SGD momentum - 4 + 4 + 4 bytes per parameter.
The lab's default: its gate is tight (float32 tolerances) and its figures are the old ones.

``bf16_adamw``: mixed precision as large models are trained (Micikevicius et al. 2018;
the ZeRO paper's "K = 12"): bf16 weights and gradients for compute, and per parameter an
fp32 master copy, AdamW's first and second moments - 2 + 2 + (4 + 4 + 4) bytes. The
optimizer updates the master and rounds it back into the bf16 weight. It walks the
parameters one at a time, so the fp32 gradient it makes is one parameter's, never all of
them at once (torch.optim.AdamW over fp32 masters would hold an fp32 copy of every
gradient during its step).

``update_shard`` is the same arithmetic on a flat slice, for ZeRO's hand-written stages;
``adamw_`` matches torch.optim.AdamW's single-tensor update and ``SGD`` torch.optim.SGD's
(tests check both, bit for bit). The lab uses no torch.optim class of its own accord:
constructing one imports torch._dynamo (``torch._disable_dynamo`` on add_param_group),
seconds of CPU, and with it sympy and inductor, in every rank of every run
(docs/PERFORMANCE.md, *Starting a run's ranks*).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

LR, MOMENTUM = 0.05, 0.9  # SGD
ADAMW_LR, BETAS, EPS, WEIGHT_DECAY = 1e-3, (0.9, 0.95), 1e-8, 0.1  # AdamW, GPT-style
# the optimizer state the gate compares, per parameter: the momentum is *the* state of SGD
# (named like the parameter); AdamW's two moments are named <parameter>.<key>
STATE_KEYS = {"fp32_sgd": ("momentum_buffer",), "bf16_adamw": ("exp_avg", "exp_avg_sq")}
DTYPES = {"fp32_sgd": torch.float32, "bf16_adamw": torch.bfloat16}


class SGD:
    """torch.optim.SGD(params, lr=LR, momentum=MOMENTUM): the same operators, in the
    multi-tensor form (``torch._foreach_*``) torch.optim takes on CUDA (on CPU a foreach
    operator is its single-tensor loop), and the state as torch.optim keeps it."""

    def __init__(self, params: list[nn.Parameter]) -> None:
        self.params = list(params)
        self.state: dict[Any, dict[str, torch.Tensor]] = {}

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        live = [p for p in self.params if p.grad is not None]
        for kind in dict.fromkeys(type(p) for p in live):  # one call per kind: DTensor or not
            self._step([p for p in live if type(p) is kind])

    def _step(self, params: list[nn.Parameter]) -> None:
        seen = [p for p in params if p in self.state]
        if seen:
            bufs = [self.state[p]["momentum_buffer"] for p in seen]
            torch._foreach_mul_(bufs, MOMENTUM)
            torch._foreach_add_(bufs, [p.grad for p in seen])
        for p in params:
            if p not in self.state:  # the first step: the buffer is the gradient
                self.state[p] = {"momentum_buffer": p.grad.detach().clone()}
        torch._foreach_add_(params, [self.state[p]["momentum_buffer"] for p in params],
                            alpha=-LR)


@torch.no_grad()
def adamw_(w: torch.Tensor, g: torch.Tensor, m: torch.Tensor, v: torch.Tensor,
           step: int) -> None:
    """One AdamW step of the fp32 tensor w with gradient g (decoupled weight decay,
    bias-corrected moments), exactly as torch.optim.AdamW(foreach=False) does it."""
    b1, b2 = BETAS
    w.mul_(1 - ADAMW_LR * WEIGHT_DECAY)
    m.lerp_(g, 1 - b1)
    v.mul_(b2).addcmul_(g, g, value=1 - b2)
    denom = v.sqrt().div_((1 - b2 ** step) ** 0.5).add_(EPS)  # one temporary
    w.addcdiv_(m, denom, value=-ADAMW_LR / (1 - b1 ** step))


class MasterAdamW:
    """bf16 parameters, fp32 master weights and AdamW moments (see the module's doc)."""

    def __init__(self, params: list[nn.Parameter]) -> None:
        self.params = list(params)
        self.state: dict[Any, dict[str, torch.Tensor]] = {}
        self.steps = 0

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        self.steps += 1
        for p in self.params:
            if p.grad is not None:
                update_shard("bf16_adamw", self.state.setdefault(p, {}), p, p.grad,
                             self.steps)


def make_optimizer(params: list[nn.Parameter], precision: str) -> Any:
    return SGD(params) if precision == "fp32_sgd" else MasterAdamW(params)


@torch.no_grad()
def update_shard(precision: str, state: dict[str, torch.Tensor], param: torch.Tensor,
                 grad: torch.Tensor, step: int) -> None:
    """One optimizer step of `param` (a whole tensor, or a ZeRO slice of a flat bucket)
    whose optimizer state is `state` (filled on the first step, as torch.optim does)."""
    if precision == "fp32_sgd":
        buf = state.get("momentum_buffer")
        if buf is None:  # torch.optim.SGD's first step: the buffer is the gradient
            state["momentum_buffer"] = buf = grad.detach().clone()
        else:
            buf.mul_(MOMENTUM).add_(grad)
        param.add_(buf, alpha=-LR)
        return
    if not state:
        master = param.detach().float()
        state.update(master=master, exp_avg=torch.zeros_like(master),
                     exp_avg_sq=torch.zeros_like(master))
    adamw_(state["master"], grad.float(), state["exp_avg"], state["exp_avg_sq"], step)
    param.copy_(state["master"])  # rounded to bf16


def state_of(opt: Any, p: Any, precision: str) -> list[tuple[str, torch.Tensor | None]]:
    """(name suffix, tensor) of each optimizer state the gate compares for parameter p."""
    st = (opt.state.get(p) or {}) if opt is not None else {}
    keys = STATE_KEYS[precision]
    return [("" if len(keys) == 1 else f".{k}", st.get(k)) for k in keys]
