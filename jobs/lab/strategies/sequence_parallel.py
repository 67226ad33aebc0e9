"""Megatron sequence parallelism by hand, and PyTorch's (Korthikanti et al. 2022, sec. 4.2.2).

Tensor parallelism (tensor_parallel.py) leaves every LayerNorm, residual add and bias on
the whole sequence on every rank. Sequence parallelism cuts those regions along the
sequence: between two blocks' tensor-parallel regions a rank holds s/t of the tokens.
Megatron's f and g become ḡ and its conjugate:

    gather (ḡ):  all-gather along the sequence before the column-parallel linears
                 (backward: reduce-scatter of the gradient)
    scatter:     reduce-scatter along the sequence after the row-parallel linears
                 (backward: all-gather of the gradient)

An all-reduce is a reduce-scatter followed by an all-gather, so per layer the bytes are
TP's: 2 all-gathers + 2 reduce-scatters of b*s*h*e forward, the same backward, where TP
sends 4 all-reduces of b*s*h*e (busbw factors (t-1)/t against 2(t-1)/t). The ends of the
stack add one all-gather each: the embedding's output (replicated, as in TP) is split
without communication and its gradient all-gathered; the last block's output is gathered
for the replicated final LayerNorm and head (whose gradient is split). LayerNorm weights
and the row-parallel biases now see only s/t tokens: their gradients are partial sums,
all-reduced over the tp group after backward (one flat all-reduce of 6*h*L elements).

Activations: the LayerNorms' inputs and statistics are divided by t; the all-gathered
input of each column-parallel region is saved whole (Megatron saves the shard and
gathers again in backward, one more all-gather per region, to divide that by t too).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)

from jobs.lab.components.instrument import Comm
from jobs.lab.components.model import Batch, build_model
from jobs.lab.predict import cost, memory, sequence
from jobs.lab.strategies.base import StepOut, Strategy
from jobs.lab.strategies.dtensor_tp import DTensorTP
from jobs.lab.strategies.tensor_parallel import (
    ColumnParallelLinear,
    MegatronTP,
    RowParallelLinear,
)


def _gather(x: torch.Tensor, comm: Comm, t: int, op: str) -> torch.Tensor:
    """(B, T/t, h) shards -> (B, T, h): all_gather_single stacks on dim 0."""
    B, n, h = x.shape
    out = torch.empty(t * B, n, h, dtype=x.dtype, device=x.device)
    comm.all_gather(out, x.contiguous(), op=op)
    return out.view(t, B, n, h).transpose(0, 1).reshape(B, t * n, h)


def _reduce_scatter(x: torch.Tensor, comm: Comm, t: int, op: str) -> torch.Tensor:
    """(B, T, h) partial sums -> (B, T/t, h), this rank's sequence shard of the sum."""
    B, T, h = x.shape
    inp = x.view(B, t, T // t, h).transpose(0, 1).contiguous()
    out = torch.empty(B, T // t, h, dtype=x.dtype, device=x.device)
    comm.reduce_scatter(out, inp.view(t * B, T // t, h), op=op)
    return out


def _split(x: torch.Tensor, rank: int, t: int) -> torch.Tensor:
    n = x.shape[1] // t
    return x[:, rank * n:(rank + 1) * n].contiguous()


class GatherFromSequence(torch.autograd.Function):
    """ḡ: all-gather forward, reduce-scatter backward (before column-parallel linears)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, comm: Comm, t: int) -> torch.Tensor:
        ctx.comm, ctx.t = comm, t
        return _gather(x, comm, t, "g_bar")

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return _reduce_scatter(grad, ctx.comm, ctx.t, "g_bar"), None, None


class ReduceScatterToSequence(torch.autograd.Function):
    """Reduce-scatter forward, all-gather backward (after row-parallel linears)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, comm: Comm, t: int) -> torch.Tensor:
        ctx.comm, ctx.t = comm, t
        return _reduce_scatter(x, comm, t, "g")

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return _gather(grad, ctx.comm, ctx.t, "g"), None, None


class ScatterToSequence(torch.autograd.Function):
    """The stack's entry: a replicated activation split (no communication); its
    gradient's shards all-gathered so that the replicated embeddings get the whole one."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, comm: Comm, rank: int, t: int) -> torch.Tensor:
        ctx.comm, ctx.t = comm, t
        return _split(x, rank, t)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return _gather(grad, ctx.comm, ctx.t, "scatter"), None, None, None


class GatherToReplicated(torch.autograd.Function):
    """The stack's exit: all-gather for the replicated final LayerNorm and head; every
    rank computes the same whole gradient, of which it keeps its shard."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, comm: Comm, rank: int, t: int) -> torch.Tensor:
        ctx.rank, ctx.t = rank, t
        return _gather(x, comm, t, "gather")

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return _split(grad, ctx.rank, ctx.t), None, None, None


class SequenceRowParallelLinear(RowParallelLinear):
    """Row-parallel, its partial sums reduce-scattered along the sequence; the bias is
    added on the shard (its gradient is a partial sum over the tp group)."""

    def __init__(self, full: nn.Linear, rank: int, t: int, comm: Comm) -> None:
        super().__init__(full, rank, t, comm)
        self.t = t

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ReduceScatterToSequence.apply(F.linear(x, self.weight), self.comm,
                                             self.t) + self.bias


class SequenceParallelBlock(nn.Module):
    """A transformer block whose residual stream and LayerNorms hold s/t tokens."""

    def __init__(self, blk: nn.Module, rank: int, t: int, comm: Comm, first: bool,
                 last: bool) -> None:
        super().__init__()
        self.rank, self.t, self.comm, self.first, self.last = rank, t, comm, first, last
        self.ln1, self.ln2 = blk.ln1, blk.ln2
        self.attn, self.mlp = blk.attn, blk.mlp
        a = blk.attn
        a.q, a.k, a.v = (ColumnParallelLinear(lin, rank, t) for lin in (a.q, a.k, a.v))
        a.proj = SequenceRowParallelLinear(a.proj, rank, t, comm)
        self.mlp.fc = ColumnParallelLinear(blk.mlp.fc, rank, t)
        self.mlp.proj = SequenceRowParallelLinear(blk.mlp.proj, rank, t, comm)

    def _attention(self, x: torch.Tensor) -> torch.Tensor:
        a = self.attn
        full = GatherFromSequence.apply(x, self.comm, self.t)  # (B, T, h)
        B, T, _ = full.shape
        q, k, v = a.heads_of(full, a.q), a.heads_of(full, a.k), a.heads_of(full, a.v)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, a/t, T, hd)
        return a.proj(y.transpose(1, 2).reshape(B, T, -1))  # (B, T/t, h)

    def _mlp(self, x: torch.Tensor) -> torch.Tensor:
        full = GatherFromSequence.apply(x, self.comm, self.t)
        return self.mlp.proj(F.gelu(self.mlp.fc(full)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.first:
            x = ScatterToSequence.apply(x, self.comm, self.rank, self.t)
        x = x + self._attention(self.ln1(x))
        x = x + self._mlp(self.ln2(x))
        return GatherToReplicated.apply(x, self.comm, self.rank, self.t) if self.last else x


def apply_sequence_parallel(model: nn.Module, rank: int, t: int, comm: Comm) -> nn.Module:
    L = len(model.blocks)
    for i, key in enumerate(list(model.blocks)):
        model.blocks[key] = SequenceParallelBlock(model.blocks[key], rank, t, comm,
                                                  first=i == 0, last=i == L - 1)
    return model


def sequence_params(model: nn.Module) -> list[nn.Parameter]:
    """Replicated parameters that see only this rank's s/t tokens: the blocks' LayerNorms
    and row-parallel biases (in model order)."""
    out = []
    for blk in model.blocks.values():
        out += [blk.ln1.weight, blk.ln1.bias, blk.attn.proj.bias, blk.ln2.weight,
                blk.ln2.bias, blk.mlp.proj.bias]
    return out


def sp_peak_memory(strat: Strategy, buffers: dict[str, float]) -> dict:
    """The step's peak of a sequence-parallel rank: one micro-batch of the whole batch,
    the blocks' matmuls split t ways (predict/sequence.py's formulas)."""
    c, e, t, n = strat.spec.cfg, strat.spec.e, strat.ctx.world, strat.spec.tokens
    split, rep = cost.tp_split_params(c.layers, c.hidden, c.seq_len, c.vocab)
    blocks = c.layers * sequence.sp_block_activations(n, c.hidden, c.heads, e, t)
    return sequence.single_batch_peak(
        strat.precision, c.kind, rep + split // t, n, c.hidden, c.vocab, e, blocks,
        sequence.sp_backward_working_set(n, c.hidden, e, t), strat.ctx.is_cuda,
        strat.largest_update(), buffers)


class MegatronSP(MegatronTP):
    name = "tp_sequence"
    label = "Megatron sequence parallel by hand (all-gather / reduce-scatter)"

    def __init__(self, ctx, spec) -> None:
        Strategy.__init__(self, ctx, spec)
        model = build_model(spec.cfg, ctx.device)
        self.model = apply_sequence_parallel(model, ctx.rank, ctx.world, ctx.comm)
        self.seq_params = sequence_params(self.model)
        self.opt = self.optimizer(list(self.model.parameters()))

    def sync_sequence_grads(self) -> None:
        """The LayerNorms' and row biases' gradients are partial sums over the tp group's
        sequence shards: one flat all-reduce makes them whole (and bit-identical)."""
        flat = torch.cat([p.grad.reshape(-1) for p in self.seq_params])
        self.ctx.comm.all_reduce(flat, op="sequence_params")
        offset = 0
        for p in self.seq_params:
            p.grad.copy_(flat[offset:offset + p.numel()].view_as(p))
            offset += p.numel()

    def train_step(self, batch: Batch) -> StepOut:
        # every rank has the full loss
        loss = self.one_step(batch.to(self.ctx.device), after_backward=self.sync_sequence_grads)
        return StepOut(loss, 1.0 / self.ctx.world)

    def predicted_memory(self) -> dict:
        c = self.spec.cfg
        flat = 6 * c.hidden * c.layers * self.spec.e
        return sp_peak_memory(self, {"sequence-parameter gradients (flat)": flat})

    def predicted_comm(self):
        c = self.spec.cfg
        return sp_comm(c.layers, self.spec.batch_size, c.seq_len, c.hidden, self.spec.e)


def sp_comm(L: int, b: int, s: int, h: int, e: int) -> dict:
    """Per layer 2 all-gathers + 2 reduce-scatters of b*s*h*e forward and the same
    backward (nccl-tests sizes: the gathered output, the unscattered input), one
    all-gather at each end of the stack, and one all-reduce of the 6*h*L LayerNorm and
    row-bias gradient elements."""
    act = b * s * h * e
    return {"all_gather": {"bytes": (4 * L + 2) * act, "count": 4 * L + 2},
            "reduce_scatter": {"bytes": 4 * L * act, "count": 4 * L},
            "all_reduce": {"bytes": 6 * h * L * e, "count": 1}}


# ---------------------------------------------------------------- PyTorch's own


def torch_sp_comm(L: int, b: int, s: int, h: int, e: int, precision: str) -> dict:
    """What DTensor's plan sends: the all-gathers and the forward reduce-scatters of the
    hand-written version, but in backward each column-parallel linear (q, k, v, fc)
    all-reduces its replicated input's gradient (4 all-reduces of b*s*h*e a layer, then
    a local split back to Shard(1)) where Megatron reduce-scatters once per region. The
    4 LayerNorm parameters of a layer keep Partial gradients (each rank's sum over its
    tokens), reduced lazily by whatever reads them: SGD's momentum update once, the
    AdamW recipe three times (its fp32 copy of the gradient read by lerp_ and twice by
    addcmul_). The row-parallel biases need none (added once, to the reduced output)."""
    act = b * s * h * e
    reads = 1 if precision == "fp32_sgd" else 3
    return {"all_gather": {"bytes": (4 * L + 2) * act, "count": 4 * L + 2},
            "reduce_scatter": {"bytes": 2 * L * act, "count": 2 * L},
            "all_reduce": {"bytes": 4 * L * (act + reads * h * memory.F32),
                           "count": 4 * L * (1 + reads)}}


def torch_sp_plan() -> dict:
    """torch's tensor-parallel tutorial recipe for one block: SequenceParallel norms, the
    attention and MLP inputs gathered from Shard(1) to Replicate, column linears as in
    TP, row linears reduce-scattering to Shard(1)."""
    gather = PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),),
                                use_local_output=True)
    return {"ln1": SequenceParallel(), "attn": gather,
            "attn.q": ColwiseParallel(), "attn.k": ColwiseParallel(),
            "attn.v": ColwiseParallel(), "attn.proj": RowwiseParallel(output_layouts=Shard(1)),
            "ln2": SequenceParallel(), "mlp": gather,
            "mlp.fc": ColwiseParallel(), "mlp.proj": RowwiseParallel(output_layouts=Shard(1))}


class TorchSequenceParallel(DTensorTP):
    name = "torch_tp_sequence"
    label = "torch DTensor SequenceParallel + Colwise/RowwiseParallel (Shard(1))"

    def __init__(self, ctx, spec) -> None:
        Strategy.__init__(self, ctx, spec)
        self.mesh = ctx.mesh()
        self.model = build_model(spec.cfg, ctx.device)
        blocks = list(self.model.blocks.values())
        for blk in blocks:
            parallelize_module(blk, self.mesh, torch_sp_plan())
        # the replicated embedding's output enters the first block split (its gradient
        # all-gathered), the last block's output is gathered for ln_f and the head
        parallelize_module(blocks[0], self.mesh, PrepareModuleInput(
            input_layouts=(Replicate(),), desired_input_layouts=(Shard(1),),
            use_local_output=True))
        parallelize_module(self.model.ln_f, self.mesh, PrepareModuleInput(
            input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),),
            use_local_output=True))
        self.opt = self.optimizer(list(self.model.parameters()))

    def predicted_memory(self) -> dict:
        return sp_peak_memory(self, {})

    def predicted_comm(self):
        if self.ctx.world == 1:
            return {}
        c = self.spec.cfg
        return torch_sp_comm(c.layers, self.spec.batch_size, c.seq_len, c.hidden,
                             self.spec.e, self.precision)
