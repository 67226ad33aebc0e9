"""Megatron-style tensor parallelism by hand (picotron's tensor_parallel.py).

In every block, q/k/v and the MLP's first linear are split by output columns
(each rank owns a/t whole heads and 4h/t hidden units); the attention output
projection and the MLP's second linear are split by input rows and produce partial
sums. f before the column linears and g after the row linears make each block
cost 4 all_reduces of b*s*h per step (2 forward, 2 backward), on the critical path.
Embeddings, LayerNorms, row biases and the head stay replicated.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from jobs.lab.components.instrument import Comm
from jobs.lab.components.model import Attention, Batch, build_model
from jobs.lab.predict import cost
from jobs.lab.strategies.base import Piece, StepOut, Strategy, pieces_of
from jobs.lab.strategies.tp_communications import f, g


class ColumnParallelLinear(nn.Module):
    def __init__(self, full: nn.Linear, rank: int, t: int) -> None:
        super().__init__()
        n = full.out_features // t
        self.weight = nn.Parameter(full.weight.detach()[rank * n:(rank + 1) * n].clone())
        self.bias = nn.Parameter(full.bias.detach()[rank * n:(rank + 1) * n].clone())
        self.shard = (0, rank * n, (rank + 1) * n)  # (dim, start, stop) in the full weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias)  # (b, T, out/t)


class RowParallelLinear(nn.Module):
    def __init__(self, full: nn.Linear, rank: int, t: int, comm: Comm) -> None:
        super().__init__()
        n = full.in_features // t
        self.weight = nn.Parameter(full.weight.detach()[:, rank * n:(rank + 1) * n].clone())
        self.bias = nn.Parameter(full.bias.detach().clone())  # replicated, added once
        self.shard = (1, rank * n, (rank + 1) * n)
        self.comm = comm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return g(F.linear(x, self.weight), self.comm) + self.bias  # (b, T, out)


class ParallelAttention(nn.Module):
    def __init__(self, attn: Attention, rank: int, t: int, comm: Comm) -> None:
        super().__init__()
        self.head_dim, self.comm = attn.head_dim, comm
        self.q = ColumnParallelLinear(attn.q, rank, t)
        self.k = ColumnParallelLinear(attn.k, rank, t)
        self.v = ColumnParallelLinear(attn.v, rank, t)
        self.proj = RowParallelLinear(attn.proj, rank, t, comm)

    heads_of = Attention.heads_of

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        x = f(x, self.comm)
        q, k, v = self.heads_of(x, self.q), self.heads_of(x, self.k), self.heads_of(x, self.v)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, a/t, T, hd)
        return self.proj(y.transpose(1, 2).reshape(B, T, -1))


class ParallelMLP(nn.Module):
    def __init__(self, mlp: nn.Module, rank: int, t: int, comm: Comm) -> None:
        super().__init__()
        self.comm = comm
        self.fc = ColumnParallelLinear(mlp.fc, rank, t)
        self.proj = RowParallelLinear(mlp.proj, rank, t, comm)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(F.gelu(self.fc(f(x, self.comm))))


def apply_tensor_parallel(model: nn.Module, rank: int, t: int, comm: Comm) -> nn.Module:
    for blk in model.blocks.values():
        blk.attn = ParallelAttention(blk.attn, rank, t, comm)
        blk.mlp = ParallelMLP(blk.mlp, rank, t, comm)
    return model


def _slicer(shard: tuple[int, int, int]):
    dim, start, stop = shard
    return lambda full: full.narrow(dim, start, stop - start)


def tp_shards(model: nn.Module, prefix: str = "") -> dict[str, tuple[int, int, int]]:
    """Parameter name (the reference's: `prefix` stripped) -> its tensor-parallel slice."""
    shards = {}
    for mod_name, mod in model.named_modules():
        mod_name = mod_name[len(prefix):] if prefix else mod_name
        if isinstance(mod, (ColumnParallelLinear, RowParallelLinear)):
            shards[f"{mod_name}.weight"] = mod.shard
            if isinstance(mod, ColumnParallelLinear):
                shards[f"{mod_name}.bias"] = (0,) + mod.shard[1:]
    return shards


def tp_pieces(strategy: Strategy, what: str) -> list[Piece]:
    """The gate's pieces of a model with tensor-parallel linears: each split parameter
    compared with its slice of the reference, the rest whole."""
    prefix = strategy.name_prefix
    shards, out = tp_shards(strategy.model, prefix), []
    for name, p in strategy.model.named_parameters():
        name = name[len(prefix):] if prefix else name
        out += pieces_of(p, name, what, strategy.opt, strategy.precision,
                         _slicer(shards[name]) if name in shards else None)
    return out


class MegatronTP(Strategy):
    name = "tp_megatron"
    label = "Megatron tensor parallel by hand (f/g operators)"

    def __init__(self, ctx, spec) -> None:
        super().__init__(ctx, spec)
        model = build_model(spec.cfg, ctx.device)
        self.model = apply_tensor_parallel(model, ctx.rank, ctx.world, ctx.comm)
        self.opt = self.optimizer(list(self.model.parameters()))

    def train_step(self, batch: Batch) -> StepOut:
        # every rank has the full loss
        return StepOut(self.one_step(batch.to(self.ctx.device)), 1.0 / self.ctx.world)

    def _pieces(self, what: str) -> list[Piece]:
        return tp_pieces(self, what)

    def grad_pieces(self) -> list[Piece]:
        return self._pieces("grad")

    def param_pieces(self) -> list[Piece]:
        return self._pieces("param")

    def state_pieces(self) -> list[Piece]:
        return self._pieces("state")

    def replicated(self):
        split = {id(m.weight) for m in self.model.modules()
                 if isinstance(m, (ColumnParallelLinear, RowParallelLinear))}
        split |= {id(m.bias) for m in self.model.modules()
                  if isinstance(m, ColumnParallelLinear)}
        return [(None, [(n, p) for n, p in self.model.named_parameters() if id(p) not in split])]

    def _split(self) -> tuple[int, int]:
        c = self.spec.cfg
        return cost.tp_split_params(c.layers, c.hidden, c.seq_len, c.vocab)

    def local_tokens(self) -> int:
        return self.spec.tokens  # every rank runs the whole batch, on its slice of the model

    def predicted_memory(self) -> dict:
        split, rep = self._split()
        return self.peak_memory(P=rep + split // self.ctx.world, t=self.ctx.world)

    all_reduces_per_layer = 4  # f and g, twice each

    def predicted_comm(self):
        c = self.spec.cfg
        return cost.tp_comm(c.layers, self.spec.batch_size, c.seq_len, c.hidden,
                                 self.spec.e, self.all_reduces_per_layer)
