"""Point-to-point operations of a pipeline stage (picotron's pp_communications).

Named from the stage's point of view: forward activations come from rank-1 and go
to rank+1; gradients go the other way. The two fused operations post a send and a
receive together, which is what keeps 1F1B's steady state from deadlocking when
two neighbours both want to send first. Sends are not waited for until the end
of the step (``flush``), so a stage goes on computing while its output travels.
"""

from __future__ import annotations

import torch

from jobs.lab.runtime import Context


class StageComm:
    def __init__(self, ctx: Context, shape: tuple[int, ...], dtype: torch.dtype) -> None:
        self.ctx, self.shape, self.dtype = ctx, shape, dtype
        self.rank, self.p = ctx.rank, ctx.world
        self.first, self.last = self.rank == 0, self.rank == self.p - 1
        self.pending: list = []  # sends still in flight (and the tensors they read)

    def flush(self) -> None:
        """Wait for every send of the step; its tensors may be freed after this."""
        for work, _tensor in self.pending:
            work.wait()
        self.pending = []

    def _send(self, t: torch.Tensor, peer: int, **fields) -> None:
        t = t.contiguous()
        self.pending.append((self.ctx.comm.send(t, peer, async_op=True, **fields), t))

    def _buf(self) -> torch.Tensor:
        # a fresh buffer per micro-batch: autograd keeps the received input alive
        return torch.empty(self.shape, dtype=self.dtype, device=self.ctx.device)

    def recv_forward(self, mb: int) -> torch.Tensor:
        x = self._buf()
        self.ctx.comm.recv(x, self.rank - 1, mb=mb, dir="fwd")
        return x.requires_grad_()

    def send_forward(self, y: torch.Tensor, mb: int) -> None:
        if not self.last:
            self._send(y.detach(), self.rank + 1, mb=mb, dir="fwd")

    def recv_backward(self, mb: int) -> torch.Tensor | None:
        if self.last:
            return None
        g = self._buf()
        self.ctx.comm.recv(g, self.rank + 1, mb=mb, dir="bwd")
        return g

    def send_backward(self, g: torch.Tensor | None, mb: int) -> None:
        if not self.first:
            self._send(g, self.rank - 1, mb=mb, dir="bwd")

    def send_forward_recv_backward(self, y: torch.Tensor, mb: int) -> torch.Tensor | None:
        if self.last:
            return None
        g, y = self._buf(), y.detach().contiguous()
        sent = self.ctx.comm.send_recv(y, self.rank + 1, g, self.rank + 1, mb=mb, dir="fwd/bwd")
        self.pending.append((sent, y))
        return g

    def send_backward_recv_forward(self, g: torch.Tensor, mb: int) -> torch.Tensor:
        x, g = self._buf(), g.contiguous()
        sent = self.ctx.comm.send_recv(g, self.rank - 1, x, self.rank - 1, mb=mb, dir="bwd/fwd")
        self.pending.append((sent, g))
        return x.requires_grad_()
