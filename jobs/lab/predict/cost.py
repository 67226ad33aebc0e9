"""Analytical cost model: bytes, FLOPs, bubble and step time - plain arithmetic.

No torch here: the formulas are checked against what the instrumentation counted and
printed beside every measurement (memory is jobs/lab/predict/memory.py). Notation
(docs/EXPERIMENTS.md): P parameters, h hidden, L layers, s sequence, b micro-batch
sequences, m micro-batches, p stages, t tensor-parallel degree, d data-parallel degree,
e bytes per element, n ranks in a collective. Collective sizes S follow nccl-tests: the
whole buffer (for all_gather the gathered output, for reduce_scatter the unscattered
input).

A step's time is priced from what it runs (jobs/lab/components/census.py counts it once, untimed)
with what the calibration measured on this host, in the same run:

    compute = sum over matrix multiplies of the probed time of that shape
            + sum over attention kernels of the probed time of that shape
            + operators x the per-operator overhead (dispatch, Python, autograd)
            + DTensor-level operators x DTensor's own dispatch overhead
            + bytes the other operators read and write / copy bandwidth
    comm    = per collective kind: count x t(S / count), t read off the calibration's
              expected time per message size (the fit t = alpha + f(n) x S / W is
              reported, with its error, and extends t past the largest size measured)

and the strategy composes them (exposed communication, the pipeline's fill and drain).
"""

from __future__ import annotations

import math

COMPUTE_TERMS = ("gemm", "attention", "op_overhead", "memory_traffic")


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


# ---------------------------------------------------------------- bucket plans


def plan_buckets(numels: list[int], cap_elems: int, pad_to: int = 1) -> list[dict]:
    """Group parameters (given in model order) into buckets in *reverse* order, the order
    their gradients appear in backward, closing a bucket once it reaches the cap (as DDP's
    compute_bucket_assignment_by_size does). Each bucket is padded to a multiple of
    pad_to (the data-parallel degree for ZeRO, so every rank owns an equal slice)."""
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
    (S = P*e), whatever the micro-batch count, thanks to no_sync. Calls: one per tensor
    (naive), one per bucket (bucketed; DDP, whose buckets - rebuilt after its first step
    in the order gradients arrive - close at the same cap)."""
    total = sum(numels) * e
    count = len(numels) if strategy == "dp_naive" else len(plan_buckets(numels, cap_elems))
    return {"all_reduce": {"bytes": total, "count": count}}


def zero_comm(numels: list[int], e: int, d: int, cap_elems: int) -> dict:
    """ZeRO-1/2: reduce_scatter the gradients, all_gather the updated parameters:
    S = padded P*e each (the same wire bytes as DP's all_reduce)."""
    buckets = plan_buckets(numels, cap_elems, pad_to=d)
    total = sum(b["padded"] for b in buckets) * e
    return {"reduce_scatter": {"bytes": total, "count": len(buckets)},
            "all_gather": {"bytes": total, "count": len(buckets)}}


def fsdp_padded(shapes: list[tuple[int, ...]], d: int) -> int:
    """Elements of one FSDP2 unit's all-gather output: each parameter is cut into d
    chunks along dim 0, each padded to the largest (ceil(dim0/d) rows)."""
    return sum(math.ceil(s[0] / d) * d * math.prod(s[1:]) for s in shapes)


def fsdp_comm(units: list[list[tuple[int, ...]]], d: int, e_param: int, e_reduce: int,
              regathered: list[bool]) -> dict:
    """ZeRO-3 (FSDP2): each unit all-gathers its padded parameters before forward, and
    again before backward if it resharded after forward (not the root: torch keeps it
    unsharded for backward), and reduce-scatters its gradients once: about 3*P*e."""
    sizes = [fsdp_padded(u, d) for u in units]
    gathers = [1 + int(again) for again in regathered]
    return {"all_gather": {"bytes": sum(g * n * e_param for g, n in zip(gathers, sizes,
                                                                        strict=True)),
                           "count": sum(gathers)},
            "reduce_scatter": {"bytes": sum(sizes) * e_reduce, "count": len(units)}}


def tp_comm(L: int, b: int, s: int, h: int, e: int, per_layer: int = 4) -> dict:
    """Megatron TP: per layer 2 forward (g) + 2 backward (f) all_reduces of b*s*h*e.
    DTensor's plan has 6: its column-parallel q, k and v each all-reduce their input's
    gradient (no shared f in front of them)."""
    return {"all_reduce": {"bytes": per_layer * L * b * s * h * e, "count": per_layer * L}}


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


# ---------------------------------------------------------------- step time


def prediction(terms: dict[str, float], formula: str, **extra) -> dict:
    total = sum(terms.values())
    dominant = max(terms, key=lambda k: terms[k]) if terms else None
    return {"step_time_s": total, "terms_s": terms, "dominant": dominant,
            "formula": formula, **extra}


def predict_flat(compute: list[dict], comm_s: float, overlap_s: float = 0.0,
                 formula: str = "") -> dict:
    """Every rank computes its share and communicates; the slowest rank paces the step.
    `compute` holds each rank's compute terms; communication beyond `overlap_s` (what
    hides behind backward on a GPU) is exposed."""
    critical = max(range(len(compute)), key=lambda r: sum(compute[r].values()))
    terms = {**compute[critical], "comm": max(0.0, comm_s - overlap_s)}
    return prediction(terms, formula or "T = compute(critical rank) + exposed comm",
                      critical_rank=critical, overlap_s=overlap_s, comm_total_s=comm_s)


def receive_waits(p: int) -> list[float]:
    """Receives a stage waits for per micro-batch in GPipe and 1F1B: the activation
    from the stage before, the gradient from the stage after (a fused send-and-receive
    is one wait); the first and last stages wait for one, middle stages for two."""
    return [float((r > 0) + (r < p - 1)) for r in range(p)]


def predict_pipeline(fb: list[dict], opt: list[dict], m: int, t_p2p: float,
                     inside: list[dict] | None = None,
                     waits: list[float] | None = None) -> dict:
    """Stage r spends fb[r]/m per micro-batch (forward + backward) and waits for
    waits[r] receives (t_p2p each; receive_waits by default): a slot. A send is posted
    and not waited for until the step's end, so it costs the sender nothing on its
    path; each message is paid once, by the stage that waits to receive it (gloo's
    receive is a rendezvous that begins when the receiver posts it, so the wait is the
    probed exchange's, however early the send was posted). The first micro-batch
    crosses every stage, the other m-1 follow at the pace of the slowest:
    T = sum_r slot_r + (m-1) max_r slot_r, plus the optimizer. `inside` (per stage,
    optional) holds other seconds spent within a stage's slots, such as tensor
    parallelism's all-reduces on the critical path: they lengthen its slots like compute
    and are reported under their own names. With one stage this is compute + inside +
    optimizer, and no bubble."""
    p = len(fb)
    inside = inside or [{} for _ in fb]
    waits = receive_waits(p) if waits is None else waits
    slot = [(sum(f.values()) + sum(i.values())) / m + w * t_p2p
            for f, i, w in zip(fb, inside, waits, strict=True)]
    pipe = sum(slot) + (m - 1) * max(slot)
    worst = max(range(p), key=lambda r: slot[r])
    own = {k: fb[worst][k] + opt[worst][k] for k in COMPUTE_TERMS}
    comm = m * waits[worst] * t_p2p
    busy = sum(own.values()) + sum(inside[worst].values()) + comm
    terms = {**own, **inside[worst], "comm": comm,
             "bubble": max(0.0, pipe + sum(opt[worst].values()) - busy)}
    idle = [1 - (sum(fb[r].values())) / pipe for r in range(p)] if pipe else [0.0] * p
    return prediction(terms, "T = sum_r slot_r + (m-1) max_r slot_r + optimizer, "
                             "slot_r = (t_f + t_b)_r + waits_r t_p2p; bubble = (p-1)/(m+p-1)",
                      critical_rank=worst, bubble_fraction=bubble_fraction(p, m),
                      predicted_idle_per_stage=idle)


def split_backward_s(backward: dict[str, float]) -> float:
    """What a backward split into two autograd passes adds (the input gradient B, then
    the weight gradient W, as torch's zero-bubble schedules run it): the W pass walks
    the graph B walked again (kept with retain_graph), so every backward operator pays
    the per-operator overhead (dispatch, autograd engine, Python) a second time; its
    GEMMs and bytes are not repeated, each pass computing only its own gradients.
    `backward` is the backward phase's priced terms (calibration.compute)."""
    return backward.get("op_overhead", 0.0)


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


def rank_params(L: int, h: int, s: int, v: int, *, t: int = 1, p: int = 1, rank: int = 0,
                tied: bool = False) -> int:
    """Parameters one rank of a GPT holds, split into p pipeline stages (stage_layers) and
    t tensor-parallel shards (the Megatron split of tp_split_params: the blocks' matmuls
    divided by t; LayerNorms, row biases, embeddings and head replicated). A tied head
    is the embedding itself on one stage; with p > 1 the last stage holds its own copy,
    as Megatron does. t = p = 1 gives param_count."""
    n = len(stage_layers(L, p, rank))
    total = n * ((12 * h * h + 7 * h) // t + 6 * h)
    total += (v * h + s * h) if rank == 0 else 0
    total += (2 * h + (0 if tied and p == 1 else h * v)) if rank == p - 1 else 0
    return total


def rank_flops_per_token(L: int, h: int, s: int, v: int, *, t: int = 1, p: int = 1,
                         rank: int = 0, tied: bool = False) -> dict[str, int]:
    """Training FLOPs per token of one rank's share, as flops_per_token splits them:
    {"gemm": 6 x its matmul parameters, "attention": 12 x its blocks x h x s / t}. The
    embedding lookups are no matmul (a tied wte is the head's, counted once). Summed over
    the stages with t = 1 this is flops_per_token."""
    n = len(stage_layers(L, p, rank))
    matmul = rank_params(L, h, s, v, t=t, p=p, rank=rank, tied=tied)
    if rank == 0:
        matmul -= s * h + (0 if tied and p == 1 else v * h)
    return {"gemm": 6 * matmul, "attention": 12 * n * h * s // t}
