"""Context parallelism by hand: ring attention over the sequence (Liu et al. 2023;
Megatron-LM's context parallelism; torch.distributed.tensor.experimental.context_parallel).

Every rank holds the whole model and s/c tokens of every sequence. Everything but
attention is token-wise (embeddings, LayerNorms, the MLP, the head and the loss), so it
runs on the rank's tokens alone and, as in data parallelism, the parameter gradients are
all-reduced over the c ranks (each rank's loss is the mean over its tokens; the shares
average to the global mean). Attention needs every earlier token's key and value: the
ranks pass their K,V block around a ring (c-1 batched isend/irecv steps, each rank
sending to rank+1 and receiving from rank-1) and each rank attends its queries to each
block as it passes, keeping per block the output and the log-sum-exp of its scores, then
combining them exactly:

    lse = log(sum_j exp(lse_j)),   out = sum_j exp(lse_j - lse) * out_j

Causality and load balance: the sequence is cut into 2c chunks and rank r holds chunks r
and 2c-1-r (one early, one late), so every rank computes 2c+1 of the c(2c+1) query x key
chunk blocks below the diagonal: a block of an earlier key chunk is attended in full, the
diagonal block with a causal mask, a later one skipped.

Backward is autograd through the ring: the ring step's backward sends the gradient of
the K,V block it received back to the rank it came from (c-1 steps, the reverse
direction). Autograd keeps every block a rank received (the whole sequence's K and V per
layer) and each block's scores and probabilities; flash-style implementations keep only
their own block and pass K,V (and dK,dV) around again in backward instead.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from jobs.lab.components.instrument import Comm
from jobs.lab.components.model import Attention, Batch
from jobs.lab.predict import cost, memory, sequence
from jobs.lab.strategies.base import StepOut
from jobs.lab.strategies.data_parallel import DataParallelNaive


def chunks_of(rank: int, c: int) -> tuple[int, int]:
    """The two of the sequence's 2c chunks rank `rank` holds: one early, one late."""
    return rank, 2 * c - 1 - rank


def local_positions(rank: int, c: int, s: int, device) -> torch.Tensor:
    n = s // (2 * c)
    return torch.cat([torch.arange(i * n, (i + 1) * n, device=device)
                      for i in chunks_of(rank, c)])


class RingPass(torch.autograd.Function):
    """One step of the ring: send this block to rank+1, receive rank-1's. Backward sends
    the gradient of the received block back to rank-1 and receives, from rank+1, the
    gradient of the block sent to it."""

    @staticmethod
    def forward(ctx, kv: torch.Tensor, comm: Comm, nxt: int, prv: int) -> torch.Tensor:
        ctx.comm, ctx.nxt, ctx.prv = comm, nxt, prv
        out = torch.empty_like(kv)
        comm.p2p(sends=[(kv, nxt)], recvs=[(out, prv)], op="ring").wait()
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        out = torch.empty_like(grad)
        ctx.comm.p2p(sends=[(grad.contiguous(), ctx.prv)], recvs=[(out, ctx.nxt)],
                     op="ring_backward").wait()
        return out, None, None, None


def block_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """One query chunk against one key chunk (q already scaled): the output and the
    log-sum-exp of the scores, per query."""
    scores = q @ k.transpose(-2, -1)  # (B, a, n, n)
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)  # (B, a, n)
    return torch.exp(scores - lse.unsqueeze(-1)) @ v, lse


def combine(outs: list[torch.Tensor], lses: list[torch.Tensor]) -> torch.Tensor:
    """Partial softmaxes made one: weights exp(lse_j - lse), lse over every block."""
    lse = torch.stack(lses)
    weights = torch.exp(lse - torch.logsumexp(lse, dim=0)).unsqueeze(-1)
    return (weights * torch.stack(outs)).sum(0)


class RingSelfAttention(nn.Module):
    """The block's attention with the rank's 2 chunks as queries, K,V passed around."""

    def __init__(self, attn: Attention, rank: int, c: int, comm: Comm) -> None:
        super().__init__()
        self.q, self.k, self.v, self.proj = attn.q, attn.k, attn.v, attn.proj
        self.head_dim, self.rank, self.c, self.comm = attn.head_dim, rank, c, comm
        self.mine = chunks_of(rank, c)

    heads_of = Attention.heads_of

    def rotate(self, kv: torch.Tensor) -> torch.Tensor:
        """One ring step: this block to rank+1, rank-1's block in."""
        return RingPass.apply(kv, self.comm, (self.rank + 1) % self.c,
                              (self.rank - 1) % self.c)

    @staticmethod
    def mask(key_chunk: int, query_chunk: int, causal: torch.Tensor) -> torch.Tensor | None:
        """The diagonal block is causal; an earlier key chunk is seen whole."""
        return causal if key_chunk == query_chunk else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape  # T = s/c: chunk mine[0], then chunk mine[1]
        n, c = T // 2, self.c
        # contiguous: its chunks then reach the matmuls as views, not a copy per block
        q = (self.heads_of(x, self.q) * (1.0 / math.sqrt(self.head_dim))).contiguous()
        kv = torch.stack([self.heads_of(x, self.k), self.heads_of(x, self.v)])
        causal = torch.ones(n, n, dtype=torch.bool, device=x.device).triu(1)
        parts: dict[int, tuple[list, list]] = {i: ([], []) for i in self.mine}
        queries = q.split(n, dim=2)  # views; their gradients are joined once, by a cat
        for step in range(c):
            if step:  # the block of rank (rank - step) mod c arrives
                kv = self.rotate(kv)
            keys, values = (t.split(n, dim=2) for t in kv.unbind(0))
            for kj, key_chunk in enumerate(chunks_of((self.rank - step) % c, c)):
                for qi, query_chunk in enumerate(self.mine):
                    if key_chunk > query_chunk:
                        continue  # the future: masked whole
                    out, lse = block_attention(queries[qi], keys[kj], values[kj],
                                               self.mask(key_chunk, query_chunk, causal))
                    parts[query_chunk][0].append(out)
                    parts[query_chunk][1].append(lse)
        y = torch.cat([combine(*parts[i]) for i in self.mine], dim=2)  # (B, a, T, hd)
        return self.proj(y.transpose(1, 2).reshape(B, T, -1))


class RingAttention(DataParallelNaive):
    name = "cp_ring"
    label = "context parallel by hand (ring attention, load-balanced causal chunks)"
    attention = RingSelfAttention

    def __init__(self, ctx, spec) -> None:
        super().__init__(ctx, spec)
        for blk in self.model.blocks.values():
            blk.attn = self.attention(blk.attn, ctx.rank, ctx.world, ctx.comm)
        self.positions = local_positions(ctx.rank, ctx.world, spec.cfg.seq_len, ctx.device)

    def local(self, batch: Batch) -> Batch:
        """This rank's two chunks of every sequence (inputs and targets)."""
        pos = self.positions.to(batch.inputs.device)
        return Batch(batch.inputs[:, pos], batch.targets[:, pos]).to(self.ctx.device)

    def train_step(self, batch: Batch) -> StepOut:
        loss = self.one_step(self.local(batch), self.forward, self.sync_gradients)
        return StepOut(loss, 1.0 / self.ctx.world)  # equal token counts

    def forward(self, inputs):
        """The model on this rank's positions of the sequence."""
        model = self.model
        x = model.wte(inputs) + model.wpe(self.positions)
        for blk in model.blocks.values():
            x = blk(x)
        return model.finish(x)

    def micro_batches(self) -> int:
        return 1

    def predicted_comm(self):
        c, spec = self.spec.cfg, self.spec
        out = cost.dp_comm(self.numels(), spec.e, "dp_naive", spec.cap_elems)
        return {**out, **ring_comm(c.layers, spec.batch_size, c.seq_len, c.hidden, spec.e,
                                   self.ctx.world)}

    def predicted_memory(self) -> dict:
        c, e, w = self.spec.cfg, self.spec.e, self.ctx.world
        n = self.spec.tokens // w
        blocks = c.layers * sequence.cp_block_activations(
            self.spec.batch_size, c.seq_len, c.hidden, c.heads, e, w)
        return sequence.single_batch_peak(
            self.precision, c.kind, c.param_count(), n, c.hidden, c.vocab, e, blocks,
            memory.backward_working_set(n, c.hidden, e), True,
            self.largest_update())


def ring_comm(L: int, b: int, s: int, h: int, e: int, c: int) -> dict:
    """Per layer c-1 ring steps forward, each sending and receiving one K,V block of
    2*b*(s/c)*h elements, and c-1 backward with their gradients."""
    if c == 1:
        return {}
    block = 2 * b * (s // c) * h * e
    steps = 2 * (c - 1) * L
    return {"send": {"bytes": steps * block, "count": steps},
            "recv": {"bytes": steps * block, "count": steps}}
