"""ZeRO-3 by hand's plan, plain arithmetic, no torch (the strategy is
jobs/lab/strategies/zero3.py; the web draws the sharding view from here): its units, the
bytes it moves, and the sharding view's rule (jobs/lab/predict/layout.py).

The units are the embedding, each block, the final norm and head, each one flat buffer
padded to a multiple of d, of which rank r keeps slice r: a flat range of each tensor the
slice crosses - as ZeRO-1/2's buckets, but per unit, in forward order, and kept instead of
the whole (FSDP2 cuts each tensor along dim 0).
"""

from __future__ import annotations

import math

from jobs.lab.predict.placement import FLAT, Ctx, Piece, nbytes


def units(names: list[str]) -> list[list[int]]:
    """ZeRO-3 by hand's units in forward order, as indices into the parameters' names
    (model order): what comes before the first block (the embedding), each block, and
    what comes after the last (the final norm and head)."""
    groups: dict[str, list[int]] = {}
    for i, name in enumerate(names):
        key = name.split(".")[1] if name.startswith("blocks.") else \
            ("finish" if groups.keys() - {"embed"} else "embed")
        groups.setdefault(key, []).append(i)
    return list(groups.values())


def comm(unit_numels: list[int], e: int, d: int) -> dict:
    """ZeRO-3 by hand: each flat unit (padded to a multiple of d) all-gathered before its
    forward and again before its backward, its gradients reduce-scattered once: 3*P*e."""
    padded = sum(math.ceil(n / d) * d for n in unit_numels)
    return {"all_gather": {"bytes": 2 * padded * e, "count": 2 * len(unit_numels)},
            "reduce_scatter": {"bytes": padded * e, "count": len(unit_numels)}}


def _unit_name(key: str, layer: int | None) -> str:
    if key == "block":
        return f"block {layer}"
    return "the embedding unit" if key == "embed" else "the final norm and head unit"


def zero3(ctx: Ctx, _strategy: str):
    d, e = ctx.d, ctx.m.e
    tensors = ctx.m.tensors()
    members = units([name for _, _, name, _ in tensors])
    where: dict[int, tuple[int, int]] = {}  # tensor -> (unit, offset in its flat buffer)
    padded = []
    for k, unit in enumerate(members):
        at = 0
        for i in unit:
            where[i] = (k, at)
            at += ctx.numels[i]
        padded.append(math.ceil(at / d) * d)

    def rule(i, key, layer, _name, _shape):
        k, off = where[i]
        n, per = ctx.numels[i], padded[k] // d
        pieces = [Piece(r, (b - a,), FLAT, a - off, b - off) for r in range(d)
                  if (a := max(off, r * per)) < (b := min(off + n, (r + 1) * per))]
        held = [0] * d
        for piece in pieces:
            held[piece.rank] = piece.numel
        unit, S = _unit_name(key, layer), nbytes(padded[k] * e)
        return "flat", pieces, held, (
            f"All-gathered with the rest of {unit} (S = {S}) just before its forward and "
            "freed after; all-gathered again before its backward (the next unit's gather is "
            "prefetched while this one computes).",
            f"Gradient reduce-scattered with the rest of {unit} (S = {S}) as soon as the "
            "unit's last gradient lands, then freed; each rank keeps the averaged gradient "
            "of its range and updates that range with its optimizer state.")

    total = sum(padded)
    pad = total - sum(ctx.numels)
    padding = f", padded by {pad:,} elements to multiples of {d}" if pad else ""
    return rule, [
        f"Every rank keeps slice r of each of {len(members)} flat units - the embedding, each "
        f"block, the final norm and head{padding} - and nothing else between uses: "
        f"{nbytes(total // d * e)} of parameters, with the gradient and optimizer state of "
        "the same ranges. The colours show who keeps each range.",
        f"Per step: each unit all-gathered twice (forward, backward) and reduce-scattered "
        f"once: S = {nbytes(2 * total * e)} of all-gathers and {nbytes(total * e)} of "
        "reduce-scatters, 1.5x DP's all-reduce; at most two units are whole at once."], {}
