"""What to change when communication dominated a training run: advice specific to how the
strategy talks (one all-reduce per gradient, buckets, gathered parameters, activations
all-reduced inside every layer, point-to-point between stages), computed from its own
numbers; and when a pipeline's bubble did. app/journal/lessons.py decides *that*
communication or the bubble dominated (its verdict); this says what that strategy can do
about it.
"""

from __future__ import annotations

from app.journal.numbers import finite, percent, seconds


def communication(name: str, comm, value: float, batch: float | None, off=None) -> str:
    """Advice for a strategy whose communication dominated (value seconds a step),
    specific to how it talks; comm: its result's "comm" (whatever a runner sent). Where
    the run found communication off (`off`: its prediction's "off") and measured it far
    below its price, it did not dominate the step, and the card says so instead."""
    measured = finite(off.get("measured_s")) if isinstance(off, dict) and \
        off.get("term") == "communication" else None
    if measured is not None and 1.5 * measured < value:
        return (f"Communication did not dominate {name} as measured: {seconds(measured)} a "
                f"step against the {seconds(value)} it was priced at, so cutting it would "
                "gain little here; its timeline shows where the step went.")
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


def bubble(name: str, value: float, m: float, p: float, batch: float | None,
           micro_batches_lost: bool, stages_take_turns: bool) -> str:
    """Advice for a pipeline strategy whose bubble dominated (value seconds a step): more
    micro-batches - unless in this run micro-batches lost to naive model parallelism
    (`micro_batches_lost`, which the card's story explains), where more of them would only
    add their overhead, and nothing helps where the ranks took turns on shared cores
    (`stages_take_turns`); naive model parallelism has no micro-batches, so micro_batches
    does not change its bubble."""
    if micro_batches_lost and stages_take_turns:
        return (f"The bubble dominates {name} ({seconds(value)}), but on this host the "
                "stages take turns on the cores, so no micro-batching can shrink it here: "
                "run it where each rank has a core or a GPU of its own, or see the "
                "calculator's prediction for GPUs.")
    if micro_batches_lost:
        more = f"batch_size {batch:g} → {4 * batch:g}" if batch else "a larger batch"
        return (f"The bubble dominates {name} ({seconds(value)}), but in this run "
                "micro-batching cost more than it saved, so more micro-batches would not "
                f"help: give each more work ({more}, micro_batches still {m:g}) so that its "
                "compute outweighs its per-operator overhead.")
    cut = (f"{percent((p - 1) / (m + p - 1))} at m={m:g} to "
           f"{percent((p - 1) / (4 * m + p - 1))} at m={4 * m:g}")
    if name == "naive_mp":
        return (f"naive_mp's bubble ({seconds(value)}) is (p−1)/p = {percent((p - 1) / p)} "
                f"of its step whatever micro_batches says; the micro-batched schedules cut "
                f"the idle share (p−1)/(m+p−1) from {cut}.")
    return (f"The bubble ({seconds(value)}) dominates {name}: raise micro_batches and the "
            f"formula's idle share falls from {cut}.")
