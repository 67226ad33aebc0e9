"""Two deliberately broken recomputations, under the hand-written strategies' names:

- recompute_full forgets to save each block's input: one attribute holds the latest
  input, so every block is rerun from the last block's input;
- recompute_selective's rerun takes only the inputs' gradients (torch.autograd.grad on
  q, k, v) - harmless for the attention core, which has no parameters, so it is the full
  block that is rerun this way: the block's parameters get no gradient.

Loaded into the workers through COMMONPLACE_LAB_PLUGIN."""

import torch

from jobs.lab import strategies
from jobs.lab.strategies.recompute import RecomputeFull, block_forward


class LatestInput(torch.autograd.Function):
    latest: torch.Tensor | None = None

    @staticmethod
    def forward(ctx, blk, x):
        ctx.blk = blk
        LatestInput.latest = x  # not save_for_backward: the next block overwrites it
        return block_forward(blk, x)

    @staticmethod
    def backward(ctx, grad):
        x = LatestInput.latest.detach().requires_grad_()
        with torch.enable_grad():
            out = block_forward(ctx.blk, x)
        torch.autograd.backward(out, grad)
        return None, x.grad


class InputGradOnly(torch.autograd.Function):
    @staticmethod
    def forward(ctx, blk, x):
        ctx.blk = blk
        ctx.save_for_backward(x)
        return block_forward(blk, x)

    @staticmethod
    def backward(ctx, grad):
        x = ctx.saved_tensors[0].detach().requires_grad_()
        with torch.enable_grad():
            out = block_forward(ctx.blk, x)
        return None, torch.autograd.grad(out, x, grad)[0]


class ForgetsInput(RecomputeFull):
    def block(self, blk, x):
        return LatestInput.apply(blk, x)


class LosesParameterGradients(RecomputeFull):
    name = "recompute_selective"

    def block(self, blk, x):
        return InputGradOnly.apply(blk, x)


strategies.register("recompute_full", ForgetsInput)
strategies.register("recompute_selective", LosesParameterGradients)
