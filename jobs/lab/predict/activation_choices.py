"""The calculator's activation memory per block, under its choices: recomputation,
sequence parallelism, interleaving, and which attention the estimate assumes.

Two models of what a block keeps (n = b*s tokens, h hidden, a heads, t TP ranks):

    lab     the lab's GPT block, as the lab measures it (memory.py): fused attention
            (SDPA / FlashAttention: no a*s*s scores kept) and no dropout. With sequence
            parallelism it is sequence.py's: the lab keeps each column-parallel region's
            gathered input whole, where Megatron keeps the shard and gathers again.
    paper   Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large
            Transformer Models", Table 2), bytes at 16-bit activations: attention scores,
            softmax and dropout masks kept (5*a*s/h), dropout masks of 1 byte:
                no parallelism / TP            s*b*h*(10 + 24/t + 5*a*s/(h*t))
                TP + sequence parallelism      s*b*h*(34/t + 5*a*s/(h*t))
                + selective recomputation      the same without the 5*a*s/(h*t) term
                full recomputation             s*b*h*2
            scaled by e/2 for other element sizes.

Recomputation: full keeps a block's input only (n*h*e, split t ways with sequence
parallelism); selective drops what only the attention core keeps (recompute.py: in the
lab's model, the kernel's log-sum-exp; in the paper's, the 5*a*s/(h*t) term).
"""

from __future__ import annotations

from jobs.lab.predict import memory, schedule, sequence

RECOMPUTE = ("none", "selective", "full")
ACTIVATIONS = ("lab", "paper")


def per_block(c: dict, n: int, e: int) -> float:
    """Bytes one block keeps for backward, n tokens of one micro-batch."""
    h, a, s, t = c["hidden"], c["heads"], c["seq_len"], c["tp"]
    sp = c["sequence_parallel"] and t > 1
    if c["activations"] == "paper":
        if c["recompute"] == "full":
            return 2 * n * h * e / 2
        core = 0.0 if c["recompute"] == "selective" else 5 * a * s / (h * t)
        return n * h * ((34 / t if sp else 10 + 24 / t) + core) * e / 2
    if c["recompute"] == "full":
        return n * h * e / (t if sp else 1)
    kept = (sequence.sp_block_activations(n, h, a, e, t) if sp
            else memory.block_activations("gpt", n, h, a, e, t))
    if c["recompute"] == "selective":
        kept -= n * (a // t) * memory.F32  # the attention kernel's log-sum-exp
    return kept


def in_flight_blocks(c: dict, rank: int, blocks: int) -> float:
    """Blocks' worth of one micro-batch's activations stage `rank` holds at its peak:
    1F1B, min(p - rank, m) micro-batches of its blocks; interleaved (v chunks a rank),
    its warm-up forwards plus one, of blocks / v each (torch's and Megatron's order)."""
    p, m, v = c["pp"], c["micro_batches"], c["virtual_stages"]
    if v == 1:
        return min(p - rank, m) * blocks
    return min(schedule.warmup(p, m, v, rank) + 1, v * m) * blocks / v


def check(c: dict) -> tuple[str, str] | None:
    """(field, why) when the choices do not make a plan, else None."""
    if c["recompute"] not in RECOMPUTE:
        return "recompute", f"must be one of {', '.join(RECOMPUTE)}"
    if c["activations"] not in ACTIVATIONS:
        return "activations", f"must be one of {', '.join(ACTIVATIONS)}"
    p, v = c["pp"], c["virtual_stages"]
    if v > 1 and p == 1:
        return "virtual_stages", "interleaving needs pipeline stages: set pp > 1"
    if v > 1 and c["layers"] % (p * v):
        return "virtual_stages", (f"layers={c['layers']} must split into pp x virtual "
                                  f"stages = {p * v} equal chunks")
    if v > 1 and c["micro_batches"] % p:
        return "virtual_stages", (f"the interleaved schedule needs micro-batches a multiple "
                                  f"of pp={p}, got {c['micro_batches']}")
    return None
