"""A mixture-of-experts MLP (Shazeer et al. 2017; GShard, Lepikhin et al. 2020; Switch,
Fedus et al. 2021) for the lab's GPT: a linear router, softmax, top-k, a capacity per
expert and per sequence with drops, each expert an MLP of the dense MLP's shape
(jobs/lab/predict/experts.py has the arithmetic).

The layer runs in three parts so that expert parallelism can put an all-to-all between
them (jobs/lab/strategies/experts.py): ``route`` and ``dispatch`` fill a static capacity
buffer of E x b x C rows (expert-major, then sequence, then place in the queue),
``experts_fn`` runs each expert on its rows (here: every expert, on this device), and
``combine`` gathers each token's rows back, weighted by its router probabilities. The
buffer's order is that of the whole batch's, so an expert sees the same rows on one
device as spread over ranks - the single-device model *is* the reference.

No load-balancing loss: the loss stays the model's cross entropy, which the reference
computes; the router learns through the combine weights. The last forward's tokens
routed to each expert, and those kept, are left in ``last_load`` (tensors, never read
inside the step).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from jobs.lab.predict import experts


class Expert(nn.Module):
    """An MLP h -> inner -> h (the dense MLP's shape with inner = 4h)."""

    def __init__(self, h: int, inner: int) -> None:
        super().__init__()
        self.fc, self.proj = nn.Linear(h, inner), nn.Linear(inner, h)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(F.gelu(self.fc(x)))


@dataclass
class Routing:
    source: torch.Tensor  # (E*b*C,) the token each buffer row holds (b*T: none, zeros)
    gather: torch.Tensor  # (b*k*T,) the row each (sequence, choice, token) fills, 0 if dropped
    weight: torch.Tensor  # (b, k, T) combine weight, 0 where dropped (fp32)
    load: torch.Tensor  # (E,) tokens routed to each expert (int64)
    kept: torch.Tensor  # (E,) of them within capacity


class MoE(nn.Module):
    def __init__(self, cfg: Any) -> None:
        super().__init__()
        h, self.E, self.k = cfg.hidden, cfg.experts, cfg.top_k
        self.C = experts.capacity(cfg.experts, cfg.top_k, cfg.capacity_factor, cfg.seq_len)
        self.router = nn.Linear(h, self.E, bias=False)
        # keyed by global index: a rank that keeps some experts keeps their names
        self.experts = nn.ModuleDict({str(j): Expert(h, 4 * h) for j in range(self.E)})
        # (E, b*C, h) buffer -> (E, b*C, h) outputs; None: every expert here
        self.experts_fn: Callable[[torch.Tensor], torch.Tensor] | None = None
        self.last_load: tuple[torch.Tensor, torch.Tensor] | None = None

    def route(self, x: torch.Tensor) -> Routing:
        b, T, _ = x.shape
        E, k, C = self.E, self.k, self.C
        # in fp32 whatever the recipe (Switch's "selective precision"): a top-k decision
        # near a tie should not turn on bf16 rounding
        logits = F.linear(x.float(), self.router.weight.float())
        probs = F.softmax(logits, dim=-1)  # (b, T, E)
        top, idx = probs.topk(k, dim=-1)  # (b, T, k)
        if k > 1:
            top = top / top.sum(-1, keepdim=True)
        with torch.no_grad():
            choice = idx.transpose(1, 2).reshape(b, k * T)  # first choices first
            onehot = F.one_hot(choice, E)  # (b, kT, E)
            place = (onehot.cumsum(1) * onehot).sum(-1) - 1  # its place in the queue
            keep = place < C
            group = torch.arange(b, device=x.device).unsqueeze(1)
            row = choice * (b * C) + group * C + place
            rows = E * b * C
            slot = torch.where(keep, row, rows)  # dropped: a spare row, cut off
            token = torch.arange(T, device=x.device).repeat(k) + group * T  # (b, kT)
            source = torch.full((rows + 1,), b * T, dtype=torch.int64, device=x.device)
            source = source.scatter(0, slot.reshape(-1), token.reshape(-1))[:rows]
            gather = torch.where(keep, row, 0)
            load = onehot.sum((0, 1))
            kept = (onehot * keep.unsqueeze(-1)).sum((0, 1))
        weight = top.transpose(1, 2) * keep.view(b, k, T)
        return Routing(source, gather.reshape(-1), weight, load, kept)

    def dispatch(self, x: torch.Tensor, r: Routing) -> torch.Tensor:
        """(b, T, h) -> the capacity buffer (E, b*C, h), unused rows zero: a gather of
        rows (its backward adds the rows' gradients back into their tokens')."""
        b, T, h = x.shape
        padded = torch.cat([x.reshape(b * T, h), x.new_zeros(1, h)])
        return padded.index_select(0, r.source).view(self.E, b * self.C, h)

    def run_experts(self, buf: torch.Tensor) -> torch.Tensor:
        return torch.stack([self.experts[str(j)](buf[j]) for j in range(self.E)])

    def combine(self, y: torch.Tensor, r: Routing, shape: torch.Size) -> torch.Tensor:
        b, T, h = shape
        rows = y.reshape(-1, h).index_select(0, r.gather).view(b, self.k, T, h)
        return (rows * r.weight.to(y.dtype).unsqueeze(-1)).sum(1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        r = self.route(x)
        self.last_load = (r.load, r.kept)
        buf = self.dispatch(x, r)
        y = self.experts_fn(buf) if self.experts_fn is not None else self.run_experts(buf)
        return self.combine(y, r, x.shape)
