"""Point-to-point operations of a pipeline stage (picotron's pp_communications).

Named from the stage's point of view: forward activations come from rank-1 and go
to rank+1; gradients go the other way. The two fused operations post a send and a
receive together, which is what keeps 1F1B's steady state from deadlocking when
two neighbours both want to send first.
"""

from __future__ import annotations

import torch

from jobs.lab.runtime import Context


class StageComm:
    def __init__(self, ctx: Context, shape: tuple[int, ...], dtype: torch.dtype) -> None:
        self.ctx, self.shape, self.dtype = ctx, shape, dtype
        self.rank, self.p = ctx.rank, ctx.world
        self.first, self.last = self.rank == 0, self.rank == self.p - 1

    def _buf(self) -> torch.Tensor:
        # a fresh buffer per micro-batch: autograd keeps the received input alive
        return torch.empty(self.shape, dtype=self.dtype, device=self.ctx.device)

    def recv_forward(self, mb: int) -> torch.Tensor:
        x = self._buf()
        self.ctx.comm.recv(x, self.rank - 1, mb=mb, dir="fwd")
        return x.requires_grad_()

    def send_forward(self, y: torch.Tensor, mb: int) -> None:
        if not self.last:
            self.ctx.comm.send(y.detach().contiguous(), self.rank + 1, mb=mb, dir="fwd")

    def recv_backward(self, mb: int) -> torch.Tensor | None:
        if self.last:
            return None
        g = self._buf()
        self.ctx.comm.recv(g, self.rank + 1, mb=mb, dir="bwd")
        return g

    def send_backward(self, g: torch.Tensor | None, mb: int) -> None:
        if not self.first:
            self.ctx.comm.send(g.contiguous(), self.rank - 1, mb=mb, dir="bwd")

    def send_forward_recv_backward(self, y: torch.Tensor, mb: int) -> torch.Tensor | None:
        if self.last:
            return None
        g = self._buf()
        self.ctx.comm.send_recv(y.detach().contiguous(), self.rank + 1, g, self.rank + 1,
                                mb=mb, dir="fwd/bwd")
        return g

    def send_backward_recv_forward(self, g: torch.Tensor, mb: int) -> torch.Tensor:
        x = self._buf()
        self.ctx.comm.send_recv(g.contiguous(), self.rank - 1, x, self.rank - 1, mb=mb,
                                dir="bwd/fwd")
        return x.requires_grad_()
