"""The two operators of Megatron-LM tensor parallelism (Shoeybi et al. 2019, fig. 3),
as autograd functions that talk through the counting wrapper.

f: identity in forward, all_reduce of the gradient in backward - placed where a
   replicated activation enters column-parallel linears.
g: all_reduce in forward, identity in backward - placed where the partial sums of
   row-parallel linears leave.
"""

from __future__ import annotations

import torch

from jobs.lab.components.instrument import Comm


class CopyToModelParallelRegion(torch.autograd.Function):
    """f"""

    @staticmethod
    def forward(ctx, x: torch.Tensor, comm: Comm) -> torch.Tensor:
        ctx.comm = comm
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        grad = grad.contiguous()
        ctx.comm.all_reduce(grad, op="f")
        return grad, None


class ReduceFromModelParallelRegion(torch.autograd.Function):
    """g"""

    @staticmethod
    def forward(ctx, x: torch.Tensor, comm: Comm) -> torch.Tensor:
        out = x.contiguous()
        comm.all_reduce(out, op="g")
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return grad, None


def f(x: torch.Tensor, comm: Comm) -> torch.Tensor:
    return CopyToModelParallelRegion.apply(x, comm)


def g(x: torch.Tensor, comm: Comm) -> torch.Tensor:
    return ReduceFromModelParallelRegion.apply(x, comm)
