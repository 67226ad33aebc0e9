"""What to change when communication dominated a training run: advice specific to how the
strategy talks (one all-reduce per gradient, buckets, gathered parameters, activations
all-reduced inside every layer, point-to-point between stages), computed from its own
numbers. app/journal/lessons.py decides *that* communication dominated (its verdict);
this says what that strategy can do about it.
"""

from __future__ import annotations

from app.journal.numbers import finite, seconds


def communication(name: str, comm, value: float, batch: float | None) -> str:
    """Advice for a strategy whose communication dominated (value seconds a step),
    specific to how it talks; comm: its result's "comm" (whatever a runner sent)."""
    rows = comm.get("per_rank") if isinstance(comm, dict) else None
    kinds = rows[0].get("per_step") if isinstance(rows, list) and rows and \
        isinstance(rows[0], dict) else None
    calls = sum(finite(k.get("count")) or 0 for k in kinds.values() if isinstance(k, dict)) \
        if isinstance(kinds, dict) else 0
    grow = f"batch_size {batch:g} → {4 * batch:g}" if batch else "a larger batch"
    cost = f"Communication ({seconds(value)} a step)"
    if name == "dp_naive":
        return (f"{cost} dominates {name}, one all-reduce per gradient ({calls:g} calls): "
                "bucket them (dp_bucket, ddp) to pay the per-call latency a few times instead.")
    if name in ("dp_bucket", "ddp", "zero1", "zero2") or name.startswith("dp_pp"):
        return (f"{cost} dominates {name}; its gradient bytes do not grow with the batch, its "
                f"compute does: {grow} makes compute the larger share (a GPU would also hide "
                "the all-reduce behind backward; on CPU gloo's threads share the cores).")
    if name in ("zero3", "fsdp2"):
        return (f"{cost} dominates {name}: parameters gathered for forward and again for "
                "backward, 1.5× data parallel's bytes, the price of holding 1/d of the model; "
                f"{grow} spreads it over more tokens.")
    if "tp" in name.split("_"):
        return (f"{cost} dominates {name}: activations all-reduced on the critical path of "
                f"every layer ({calls:g} calls a step), so tensor parallelism stays inside a "
                "node's fast links; a larger hidden grows compute by its square, bytes linearly.")
    return f"{cost} dominates {name}: larger micro-batches send fewer, larger messages."
