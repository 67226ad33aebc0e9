"""The sharding view of the interleaved schedules (interleaved_1f1b and PyTorch's
ScheduleInterleaved1F1B / ScheduleInterleavedZeroBubble): the L blocks cut into p*v
chunks, chunk c on rank c % p - so rank r holds chunks r, r+p, ..., r+(v-1)p, the layout
jobs/lab/strategies/interleaved.py and torch_schedules.py build. Torch-free."""

from __future__ import annotations

import math

from jobs.lab.predict import cost
from jobs.lab.predict.placement import Ctx, Piece, nbytes

SCHEDULES = {
    "interleaved_1f1b": "interleaved 1F1B by hand",
    "torch_interleaved_1f1b": "PyTorch's ScheduleInterleaved1F1B",
    "torch_zero_bubble": "PyTorch's ScheduleInterleavedZeroBubble (backward split into input "
                         "and weight gradients)",
}


def interleaved(ctx: Ctx, strategy: str):
    m, p, v = ctx.m, ctx.d, ctx.virtual_stages
    chunks = p * v
    if m.layers < chunks:
        raise ValueError(f"{m.layers} layers cannot fill {p} stages x {v} chunks")
    spans = [cost.stage_layers(m.layers, chunks, c) for c in range(chunks)]
    chunk_of = {i: c for c, span in enumerate(spans) for i in span}
    owner = {"embed": 0, "finish": (chunks - 1) % p}
    msg = nbytes(ctx.batch_size // ctx.micro_batches * m.seq_len * m.hidden * m.e)
    block_comm: dict[tuple, list[str]] = {}
    for c, span in enumerate(spans):
        r = c % p
        if c < chunks - 1:
            block_comm.setdefault(("block", span[-1]), []).append(
                f"Chunk {c}'s output ({msg} a micro-batch) goes to rank {(c + 1) % p} "
                f"(chunk {c + 1}); its gradient comes back in backward.")
        if c > 0:
            block_comm.setdefault(("block", span[0]), []).append(
                f"Chunk {c} on rank {r} takes its input from rank {(c - 1) % p} "
                f"(chunk {c - 1}) and sends the gradient back.")

    def rule(_i, key, layer, _name, shape):
        r = chunk_of[layer] % p if key == "block" else owner[key]
        held = [math.prod(shape) if q == r else 0 for q in range(p)]
        where = f"chunk {chunk_of[layer]}" if key == "block" else "its stage"
        return "stage", [Piece(r, shape)], held, (
            f"None: rank {r} owns it ({where}), and its gradient stays there.",)

    per_rank = "; ".join(
        f"rank {r}: " + ", ".join(f"blocks {spans[c][0]}–{spans[c][-1]}" if len(spans[c]) > 1
                                  else f"block {spans[c][0]}" for c in range(r, chunks, p))
        for r in range(p))
    return rule, [
        f"The blocks are cut into {chunks} chunks, {v} a rank, dealt round-robin ({per_rank}); "
        f"a micro-batch goes round the ranks {v} times. Schedule: {SCHEDULES[strategy]}.",
        f"Only activations move: {msg} per micro-batch at each of the {chunks - 1} chunk "
        f"boundaries, each way - {v} times 1F1B's messages for a bubble of "
        f"(p-1)/(v*m+p-1)."], block_comm
