"""Analytical cost model: bytes, FLOPs, memory, bubble and step time - plain arithmetic.

No torch here: the formulas are checked against what the instrumentation counted
and printed beside every measurement. Notation (docs/EXPERIMENTS.md): P parameters,
h hidden, L layers, s sequence, b micro-batch sequences, m micro-batches, p stages,
t tensor-parallel degree, d data-parallel degree, e bytes per element, n ranks in
a collective. Collective sizes S follow nccl-tests: the whole buffer (for
all_gather the gathered output, for reduce_scatter the unscattered input).

Step times use a calibrated link model per operation, t(S) = alpha + f(n)*S/W
(f = nccl-tests bus-bandwidth factor), and a calibrated compute rate C (FLOP/s).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

# bytes per parameter with fp32 SGD+momentum, the optimizer every gated strategy uses:
# weights, gradients, momentum (Adam in mixed precision would be 2 + 2 + 12)
E_PARAM, E_GRAD, K_OPT = 4, 4, 4


def busbw_factor(op: str, n: int) -> float:
    """nccl-tests factor: busbw = algbw * factor (doc/PERFORMANCE.md)."""
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    return 1.0  # broadcast, send_recv


def param_count(kind: str, L: int, h: int, s: int, v: int, tied: bool = False) -> int:
    """GPT: wte + wpe + blocks + ln_f + head (none of its own when tied to wte)."""
    if kind == "gpt":
        head = 0 if tied else h * v
        return v * h + s * h + L * (12 * h * h + 13 * h) + 2 * h + head
    return 2 * (h * h + h) + L * (8 * h * h + 5 * h)  # in, blocks, out


def matmul_params(kind: str, L: int, h: int, s: int, v: int, tied: bool = False) -> int:
    """Parameters that take part in a matmul (embedding lookups excluded; a tied wte is
    the head's matmul, so it counts once)."""
    if kind == "gpt":
        return param_count(kind, L, h, s, v, tied) - (0 if tied else v * h) - s * h
    return param_count(kind, L, h, s, v)


def flops_per_token(kind: str, L: int, h: int, s: int, v: int, tied: bool = False) -> int:
    """Training FLOPs per token: 6N + 12*L*h*s (PaLM appendix B, nanoGPT, picotron)."""
    attention = 12 * L * h * s if kind == "gpt" else 0
    return 6 * matmul_params(kind, L, h, s, v, tied) + attention


def tp_split_params(L: int, h: int, s: int, v: int) -> tuple[int, int]:
    """(split, replicated) parameter counts of the Megatron GPT split.

    Per block, q/k/v/fc weights+biases and both row-linear weights are split
    (12h^2 + 7h); row-linear biases and the two LayerNorms are replicated (6h).
    Embeddings, final LayerNorm and head stay replicated."""
    split = L * (12 * h * h + 7 * h)
    return split, param_count("gpt", L, h, s, v) - split


def bubble_fraction(p: int, m: int) -> float:
    """Idle fraction of a GPipe/1F1B step: (p-1)/(m+p-1)."""
    return (p - 1) / (m + p - 1)


def activation_bytes_per_layer(s: int, b: int, h: int, e: int = 4) -> int:
    """Korthikanti et al. 2022 without the attention-score term (flash/SDPA attention
    keeps no s*s matrix): 34*s*b*h bytes at 2 bytes per element, scaled to e."""
    return 34 * s * b * h * e // 2


# ---------------------------------------------------------------- bucket plans


def plan_buckets(numels: list[int], cap_elems: int, pad_to: int = 1) -> list[dict]:
    """Group parameters (given in model order) into buckets in *reverse* order, the order
    their gradients appear in backward. Each bucket is padded to a multiple of pad_to
    (the data-parallel degree for ZeRO, so every rank owns an equal slice)."""
    buckets: list[dict] = []
    current: list[int] = []
    size = 0
    for i in reversed(range(len(numels))):
        current.append(i)
        size += numels[i]
        if size >= cap_elems:
            buckets.append({"params": current, "numel": size})
            current, size = [], 0
    if current:
        buckets.append({"params": current, "numel": size})
    for bkt in buckets:
        bkt["padded"] = math.ceil(bkt["numel"] / pad_to) * pad_to
    return buckets


# ---------------------------------------------------------------- comm bytes per step


def dp_comm(numels: list[int], e: int, strategy: str, cap_elems: int) -> dict:
    """Data parallel: one all_reduce of every gradient byte per optimizer step
    (S = P*e), whatever the micro-batch count, thanks to no_sync."""
    total = sum(numels) * e
    if strategy == "dp_naive":
        count = len(numels)
    elif strategy == "dp_bucket":
        count = len(plan_buckets(numels, cap_elems))
    else:
        count = None  # DDP picks its own buckets
    return {"all_reduce": {"bytes": total, "count": count}}


def zero_comm(numels: list[int], e: int, d: int, cap_elems: int) -> dict:
    """ZeRO-1/2: reduce_scatter the gradients, all_gather the updated parameters:
    S = padded P*e each (the same wire bytes as DP's all_reduce)."""
    buckets = plan_buckets(numels, cap_elems, pad_to=d)
    total = sum(b["padded"] for b in buckets) * e
    return {"reduce_scatter": {"bytes": total, "count": len(buckets)},
            "all_gather": {"bytes": total, "count": len(buckets)}}


def fsdp_comm(P: int, e: int, units: int) -> dict:
    """ZeRO-3: all_gather forward + all_gather backward + reduce_scatter: 3*P*e."""
    return {"all_gather": {"bytes": 2 * P * e, "count": 2 * units},
            "reduce_scatter": {"bytes": P * e, "count": units}}


def tp_comm(L: int, b: int, s: int, h: int, e: int) -> dict:
    """Megatron TP: per layer 2 forward (g) + 2 backward (f) all_reduces of b*s*h*e."""
    return {"all_reduce": {"bytes": 4 * L * b * s * h * e, "count": 4 * L}}


def pp_comm(rank: int, p: int, m: int, mb_bytes: int) -> dict:
    """Pipeline stage `rank`: per micro-batch, activation forward and gradient backward
    over each boundary it touches (4*m*s*b*h*e for a middle stage, half at the ends)."""
    sends = recvs = 0
    if rank < p - 1:  # send activation forward, receive its gradient
        sends += m
        recvs += m
    if rank > 0:  # receive activation, send gradient back
        sends += m
        recvs += m
    out = {}
    if sends:
        out["send"] = {"bytes": sends * mb_bytes, "count": sends}
        out["recv"] = {"bytes": recvs * mb_bytes, "count": recvs}
    return out


# ---------------------------------------------------------------- memory per rank


def memory_per_rank(strategy: str, P: int, *, d: int = 1, P_local: int | None = None) -> dict:
    """Model-state bytes per rank (fp32 SGD+momentum: 4+4+4 bytes/param).
    DP: 12P. ZeRO-1: 8P + 4P/d. ZeRO-2: 4P + 8P/d. ZeRO-3: 12P/d.
    TP and PP pass P_local (their own slice of the model)."""
    local = P if P_local is None else P_local
    if strategy == "zero1":
        parts = (E_PARAM * local, E_GRAD * local, K_OPT * local / d)
    elif strategy == "zero2":
        parts = (E_PARAM * local, (E_GRAD * local) / d, K_OPT * local / d)
    elif strategy in ("fsdp2", "zero3"):
        parts = (E_PARAM * local / d, E_GRAD * local / d, K_OPT * local / d)
    else:
        parts = (E_PARAM * local, E_GRAD * local, K_OPT * local)
    return {"params": parts[0], "grads": parts[1], "optimizer": parts[2],
            "total": sum(parts)}


# ---------------------------------------------------------------- calibrated timing


@dataclass
class LinkFit:
    alpha: float  # seconds
    bandwidth: float  # bytes/s of bus bandwidth

    def time(self, op: str, S: float, n: int) -> float:
        return self.alpha + busbw_factor(op, n) * S / self.bandwidth


def fit_link(op: str, n: int, samples: list[tuple[float, float]]) -> LinkFit:
    """Fit t = alpha + f*S/W over (S, t) samples by least squares on the *relative*
    error (weights 1/t^2), so that sizes spanning decades all count."""
    xs = [busbw_factor(op, n) * S for S, _ in samples]
    ts = [t for _, t in samples]
    ws = [1.0 / (t * t) for t in ts]
    sw = sum(ws)
    mx = sum(w * x for w, x in zip(ws, xs, strict=True)) / sw
    mt = sum(w * t for w, t in zip(ws, ts, strict=True)) / sw
    var = sum(w * (x - mx) ** 2 for w, x in zip(ws, xs, strict=True))
    cov = sum(w * (x - mx) * (t - mt) for w, x, t in zip(ws, xs, ts, strict=True))
    slope = cov / var if var else 0.0
    alpha = mt - slope * mx
    if slope <= 0 or alpha < 0:  # noise: fall back to latency = smallest, W from largest
        x_big, t_big = max(zip(xs, ts, strict=True))
        alpha = min(ts)
        slope = max(t_big - alpha, t_big * 1e-3) / x_big if x_big else 1e-12
    return LinkFit(alpha=alpha, bandwidth=1.0 / slope)


@dataclass
class Calibration:
    flops: float  # FLOP/s of one rank while all ranks compute (GEMM of the model's shape)
    peak_flops: float  # best GEMM FLOP/s measured: the training runs' MFU denominator
    links: dict[str, LinkFit] = field(default_factory=dict)
    n: int = 1
    peak_name: str = ""  # what peak_flops is, e.g. "measured 4096^3 float32 GEMM"

    def coll(self, op: str, S: float, count: int = 1) -> float:
        if S <= 0 or count == 0 or self.n == 1:
            return 0.0  # one rank moves nothing (and no link was calibrated)
        fit = self.links[op]
        return count * fit.alpha + busbw_factor(op, self.n) * S / fit.bandwidth

    def as_dict(self) -> dict:
        return {"flops": self.flops, "peak_flops": self.peak_flops, "n": self.n,
                "peak_name": self.peak_name,
                "links": {k: {"alpha_s": v.alpha, "busbw_Bps": v.bandwidth}
                          for k, v in self.links.items()}}


def _prediction(terms: dict[str, float], formula: str, **extra) -> dict:
    total = sum(terms.values())
    dominant = max(terms, key=lambda k: terms[k]) if terms else None
    return {"step_time_s": total, "terms_s": terms, "dominant": dominant,
            "formula": formula, **extra}


def predict_single(flops: float, cal: Calibration) -> dict:
    return _prediction({"compute": flops / cal.flops}, "T = FLOPs/C")


def predict_dp(flops_local: float, comm: dict, cal: Calibration, overlap_s: float = 0.0) -> dict:
    ar = comm["all_reduce"]
    t_comm = cal.coll("all_reduce", ar["bytes"], ar["count"] or 1)
    exposed = max(0.0, t_comm - overlap_s)
    return _prediction({"compute": flops_local / cal.flops, "comm": exposed},
                       "T = 6*N*tokens/d / C + [count*alpha + 2(d-1)/d * P*e / W] - overlap")


def predict_zero(flops_local: float, comm: dict, cal: Calibration) -> dict:
    t_comm = sum(cal.coll(op, c["bytes"], c["count"] or 1) for op, c in comm.items())
    return _prediction({"compute": flops_local / cal.flops, "comm": t_comm},
                       "T = 6*N*tokens/d / C + T_RS(P*e) + T_AG(P*e) [+ T_AG(P*e) for ZeRO-3]")


def predict_tp(flops_local: float, comm: dict, cal: Calibration) -> dict:
    ar = comm["all_reduce"]
    per = ar["bytes"] / ar["count"]
    t_comm = ar["count"] * cal.coll("all_reduce", per)
    return _prediction({"compute": flops_local / cal.flops, "comm": t_comm},
                       "T = (6*N_split/t + 6*N_rep)*tokens / C + 4*L*T_AR(b*s*h*e)")


def predict_pp(stage_flops_mb: list[float], p: int, m: int, mb_bytes: int,
               cal: Calibration) -> dict:
    """T = (m + p - 1) * (t_f + t_b + 2*t_p2p), slowest stage setting the pace."""
    t_fb = max(stage_flops_mb) / cal.flops
    t_p2p = cal.coll("send_recv", mb_bytes) if p > 1 else 0.0
    slot = t_fb + 2 * t_p2p
    return _prediction(
        {"compute": m * t_fb, "comm": m * 2 * t_p2p, "bubble": (p - 1) * slot},
        "T = (m+p-1)*(t_f+t_b+2*t_p2p); bubble = (p-1)/(m+p-1)",
        bubble_fraction=bubble_fraction(p, m))


# ---------------------------------------------------------------- pipeline stages


def stage_layers(L: int, p: int, rank: int) -> range:
    """Blocks of stage `rank`: L/p each, the first L % p stages taking one more."""
    base, extra = divmod(L, p)
    start = rank * base + min(rank, extra)
    return range(start, start + base + (1 if rank < extra else 0))


def stage_params(kind: str, L: int, h: int, s: int, v: int, p: int, rank: int) -> int:
    n = len(stage_layers(L, p, rank))
    if kind == "gpt":
        total = n * (12 * h * h + 13 * h)
        total += (v * h + s * h) if rank == 0 else 0
        total += (2 * h + h * v) if rank == p - 1 else 0
    else:
        total = n * (8 * h * h + 5 * h)
        total += (h * h + h) if rank == 0 else 0
        total += (h * h + h) if rank == p - 1 else 0
    return total


def stage_flops_per_token(kind: str, L: int, h: int, s: int, v: int, p: int, rank: int) -> int:
    """6 * (matmul parameters of the stage) + the attention term of its blocks."""
    n = len(stage_layers(L, p, rank))
    if kind == "gpt":
        matmul = n * (12 * h * h + 13 * h) + ((2 * h + h * v) if rank == p - 1 else 0)
        return 6 * matmul + 12 * n * h * s
    return 6 * stage_params(kind, L, h, s, v, p, rank)
