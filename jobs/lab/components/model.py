"""The two models every strategy trains: a small GPT and a plain residual MLP stack.

GPT as in nanoGPT (Radford et al. 2019), with separate q/k/v projections so that
tensor parallelism can give each rank whole heads, no dropout (correctness checks
need determinism) and an untied LM head (so pipeline stages own disjoint weights)
unless ``tie_head`` (GPT-2's 124M is tied: with an untied head it is 163M).
Both models expose the same three pieces - ``embed``, ``blocks`` and ``finish`` -
which is all a pipeline needs to cut them into stages.

Parameter counts are exact (a test checks them against ``numel``):
    GPT: v*h + s*h + L*(12h^2 + 13h) + 2h + h*v (tied: without the last h*v)
    MLP: 2(h^2 + h) + L*(8h^2 + 5h)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

from jobs.lab.components.moe import MoE
from jobs.lab.predict import cost
from jobs.lab.predict import experts as moecost


@dataclass(frozen=True)
class ModelConfig:
    kind: str = "gpt"  # "gpt" | "mlp"
    layers: int = 4
    hidden: int = 64
    heads: int = 4
    seq_len: int = 32
    vocab: int = 256
    dtype: str = "float32"
    seed: int = 0
    tie_head: bool = False  # GPT: the head's weight is wte's
    # GPT: every block's MLP a mixture of `experts` experts (0: the dense MLP, unchanged),
    # each token routed to its top_k, capacity_factor x its share (jobs/lab/components/moe.py)
    experts: int = 0
    top_k: int = 1
    capacity_factor: float = 1.0

    @property
    def torch_dtype(self) -> torch.dtype:
        return getattr(torch, self.dtype)

    def _dims(self) -> tuple:
        return self.kind, self.layers, self.hidden, self.seq_len, self.vocab

    def _moe(self) -> tuple:
        return self.layers, self.hidden, self.seq_len, self.vocab, self.experts

    def param_count(self) -> int:
        if self.experts:  # every expert's (predict/experts.py)
            return moecost.param_count(*self._moe(), tied=self.tie_head)
        return cost.param_count(*self._dims(), tied=self.tie_head)

    def matmul_params(self) -> int:
        if self.experts:  # active: the router and k experts
            return moecost.matmul_params(*self._moe(), self.top_k, tied=self.tie_head)
        return cost.matmul_params(*self._dims(), tied=self.tie_head)

    def flops_per_token(self) -> int:
        if self.experts:  # active: the router and k experts
            return moecost.flops_per_token(*self._moe(), self.top_k, tied=self.tie_head)
        return cost.flops_per_token(*self._dims(), tied=self.tie_head)

    def as_dict(self) -> dict:
        return asdict(self)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        h = cfg.hidden
        self.head_dim = h // cfg.heads
        self.q, self.k, self.v = nn.Linear(h, h), nn.Linear(h, h), nn.Linear(h, h)
        self.proj = nn.Linear(h, h)

    def heads_of(self, x: torch.Tensor, lin: nn.Module) -> torch.Tensor:
        B, T, _ = x.shape
        # -1 heads: under tensor parallelism a rank sees only its own heads
        return lin(x).view(B, T, -1, self.head_dim).transpose(1, 2)  # (B, a, T, hd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        q, k, v = self.heads_of(x, self.q), self.heads_of(x, self.k), self.heads_of(x, self.v)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, a, T, hd)
        return self.proj(y.transpose(1, 2).reshape(B, T, -1))


class MLP(nn.Module):
    def __init__(self, h: int) -> None:
        super().__init__()
        self.fc, self.proj = nn.Linear(h, 4 * h), nn.Linear(4 * h, h)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(F.gelu(self.fc(x)))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.ln1, self.attn = nn.LayerNorm(cfg.hidden), Attention(cfg)
        self.ln2 = nn.LayerNorm(cfg.hidden)
        self.mlp = MoE(cfg) if cfg.experts else MLP(cfg.hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class MLPBlock(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.mlp = MLP(cfg.hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.mlp(x)


class GPT(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        h = cfg.hidden
        self.wte, self.wpe = nn.Embedding(cfg.vocab, h), nn.Embedding(cfg.seq_len, h)
        # a ModuleDict keyed "0".."L-1" keeps the FQNs of a ModuleList and lets a pipeline
        # stage delete the blocks it does not own
        self.blocks = nn.ModuleDict({str(i): Block(cfg) for i in range(cfg.layers)})
        self.ln_f, self.head = nn.LayerNorm(h), nn.Linear(h, cfg.vocab, bias=False)
        if cfg.tie_head:
            self.head.weight = self.wte.weight  # (v, h) both: one tensor, two uses

    def embed(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        return self.wte(idx) + self.wpe(pos)  # (B, T, h)

    def finish(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.ln_f(x))  # (B, T, v) logits

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.embed(idx)
        for blk in self.blocks.values():
            x = blk(x)
        return self.finish(x)

    @staticmethod
    def loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())

    EMBED_MODULES = ("wte", "wpe")
    FINISH_MODULES = ("ln_f", "head")


class MLPStack(nn.Module):
    """Input projection, L residual MLP blocks, output projection; MSE loss."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        h = cfg.hidden
        self.inp = nn.Linear(h, h)
        self.blocks = nn.ModuleDict({str(i): MLPBlock(cfg) for i in range(cfg.layers)})
        self.out = nn.Linear(h, h)

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        return self.inp(x)

    def finish(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.embed(x)
        for blk in self.blocks.values():
            x = blk(x)
        return self.finish(x)

    @staticmethod
    def loss(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.mse_loss(out.float(), target.float())

    EMBED_MODULES = ("inp",)
    FINISH_MODULES = ("out",)


def build_model(cfg: ModelConfig, device: torch.device | str = "cpu") -> nn.Module:
    """The same weights on every rank and in every strategy: seeded CPU init, then moved.
    Only the CPU generator is seeded (the init draws from it alone): torch.manual_seed
    would also queue a seeding of every lazily initialised device's generator, each
    recording the Python stack that asked."""
    with torch.random.fork_rng(devices=[]):
        torch.default_generator.manual_seed(cfg.seed)
        model = GPT(cfg) if cfg.kind == "gpt" else MLPStack(cfg)
    return model.to(device=device, dtype=cfg.torch_dtype)


@dataclass
class Batch:
    inputs: torch.Tensor  # GPT: (B, T) token ids; MLP: (B, T, h) floats
    targets: torch.Tensor  # GPT: (B, T) token ids; MLP: (B, T, h) floats

    @property
    def size(self) -> int:
        return self.inputs.shape[0]

    def rows(self, start: int, stop: int) -> Batch:
        return Batch(self.inputs[start:stop], self.targets[start:stop])

    def split(self, n: int) -> list[Batch]:
        per = self.size // n
        return [self.rows(i * per, (i + 1) * per) for i in range(n)]

    def to(self, device: torch.device | str) -> Batch:
        return Batch(self.inputs.to(device), self.targets.to(device))


def make_batch(cfg: ModelConfig, batch_size: int, step: int = 0) -> Batch:
    """Deterministic data for (seed, step): identical on every rank."""
    g = torch.Generator().manual_seed(cfg.seed * 1_000_003 + step + 1)
    B, T = batch_size, cfg.seq_len
    if cfg.kind == "gpt":
        x = torch.randint(cfg.vocab, (B, T), generator=g)
        y = torch.randint(cfg.vocab, (B, T), generator=g)
    else:
        x = torch.randn(B, T, cfg.hidden, generator=g).to(cfg.torch_dtype)
        y = torch.randn(B, T, cfg.hidden, generator=g).to(cfg.torch_dtype)
    return Batch(x, y)


def loss_fn(kind: str):
    """Mean loss over every token of the batch given: cross entropy (GPT) or MSE (MLP)."""
    return GPT.loss if kind == "gpt" else MLPStack.loss
