"""Point-to-point operations of a pipeline stage (picotron's pp_communications).

Named from the stage's point of view: forward activations come from rank-1 and go
to rank+1; gradients go the other way. Every operation is one batch_isend_irecv
(Megatron, picotron and torch's schedules do the same): nccl runs a pair's traffic
on one stream, and a send and a receive posted separately in both directions can
wait on each other for ever once messages pass nccl's eager size. The two fused
operations post a send and a receive in one batch, which is what keeps 1F1B's steady
state from deadlocking when two neighbours both want to send first. Lone sends are
not waited for until the end of the step (``flush``), so a stage goes on computing
while its output travels; nothing here synchronizes the device.
"""

from __future__ import annotations

import torch

from jobs.lab.components.context import Context


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

    def _buf(self) -> torch.Tensor:
        # a fresh buffer per micro-batch: autograd keeps the received input alive
        return torch.empty(self.shape, dtype=self.dtype, device=self.ctx.device)

    def _send(self, t: torch.Tensor, peer: int, **fields) -> None:
        t = t.contiguous()
        self.pending.append((self.ctx.comm.p2p(sends=[(t, peer)], **fields), t))

    def _recv(self, peer: int, **fields) -> torch.Tensor:
        t = self._buf()
        self.ctx.comm.p2p(recvs=[(t, peer)], **fields).wait()
        return t

    def _exchange(self, t: torch.Tensor, peer: int, **fields) -> torch.Tensor:
        """Send t to peer and receive its tensor, as one batch."""
        got, t = self._buf(), t.contiguous()
        self.ctx.comm.p2p(sends=[(t, peer)], recvs=[(got, peer)], **fields).wait()
        return got

    def recv_forward(self, mb: int) -> torch.Tensor:
        return self._recv(self.rank - 1, mb=mb, dir="fwd").requires_grad_()

    def send_forward(self, y: torch.Tensor, mb: int) -> None:
        if not self.last:
            self._send(y.detach(), self.rank + 1, mb=mb, dir="fwd")

    def recv_backward(self, mb: int) -> torch.Tensor | None:
        return None if self.last else self._recv(self.rank + 1, mb=mb, dir="bwd")

    def send_backward(self, g: torch.Tensor | None, mb: int) -> None:
        if not self.first:
            self._send(g, self.rank - 1, mb=mb, dir="bwd")

    def send_forward_recv_backward(self, y: torch.Tensor, mb: int) -> torch.Tensor | None:
        if self.last:
            return None
        return self._exchange(y.detach(), self.rank + 1, mb=mb, dir="fwd/bwd")

    def send_backward_recv_forward(self, g: torch.Tensor, mb: int) -> torch.Tensor:
        return self._exchange(g, self.rank - 1, mb=mb, dir="bwd/fwd").requires_grad_()
