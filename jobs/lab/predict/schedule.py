"""Interleaved and zero-bubble pipeline schedules as plain arithmetic (torch-free).

With v virtual stages per rank (Narayanan et al. 2021, "interleaved 1F1B"), the model's
blocks are cut into p*v chunks; rank r holds chunks r, r+p, ..., r+(v-1)p, so a
micro-batch crosses the ranks v times. The fill and drain still take p-1 slots, but a
slot is now one chunk's forward+backward - 1/v of a stage's - so the idle fraction is
(p-1)/(v*m + p-1), for v times the point-to-point messages.

The order (what PyTorch's ScheduleInterleaved1F1B and Megatron-LM run, for m a multiple
of p): the virtual micro-batches k = 0 .. v*m-1 run chunk (k // p) % v of micro-batch
(k // (p*v))*p + k % p forward; backward takes the chunks the other way round. Rank r
warms up with (v-1)*p + 2*(p-1-r) forwards (at most v*m), then alternates one forward,
one backward, then runs the backwards it still owes.

A zero-bubble schedule (Qi et al. 2024, ZB-H1 / torch's ScheduleInterleavedZeroBubble)
splits a backward into B (the input gradient, on the critical path) and W (the weight
gradient, which nothing waits for) and runs the W's in what would be bubble: with
t_F = t_B = t_W the idle fraction falls to (p-1)/(3*v*m + p-1), and to zero in the
steady state (ZB-H2 fills the fill and drain too, with more memory).
"""

from __future__ import annotations

from collections import Counter

Op = tuple[str, int, int]  # ("forward"|"backward", micro-batch, chunk)


def interleaved_bubble(p: int, m: int, v: int) -> float:
    """Idle fraction of interleaved 1F1B: (p-1)/(v*m + p-1); v = 1 is 1F1B's."""
    return (p - 1) / (v * m + p - 1)


def zero_bubble_claim(p: int, m: int, v: int) -> float:
    """ZB-H1's idle fraction with t_F = t_B = t_W: the fill and drain shrink from
    (p-1)(t_F+t_B+t_W) to (p-1)(t_F+t_B-t_W), i.e. (p-1)/(3*v*m + p-1) of the step; the
    steady state has none."""
    return (p - 1) / (3 * v * m + p - 1)


def warmup(p: int, m: int, v: int, rank: int) -> int:
    """Forwards rank r runs before its first backward (torch's _get_warmup_ops)."""
    return min((v - 1) * p + 2 * (p - 1 - rank), v * m)


def forward_op(k: int, p: int, v: int) -> tuple[int, int]:
    """(micro-batch, chunk) of the k-th forward of a rank."""
    return (k // (p * v)) * p + k % p, (k // p) % v


def backward_op(k: int, p: int, v: int) -> tuple[int, int]:
    mb, chunk = forward_op(k, p, v)
    return mb, v - 1 - chunk


def order(p: int, m: int, v: int, rank: int) -> list[Op]:
    """The exact (kind, micro-batch, chunk) sequence rank r runs."""
    total, w = v * m, warmup(p, m, v, rank)
    ops: list[Op] = [("forward", *forward_op(k, p, v)) for k in range(w)]
    for k in range(total - w):
        ops += [("forward", *forward_op(w + k, p, v)), ("backward", *backward_op(k, p, v))]
    return ops + [("backward", *backward_op(k, p, v)) for k in range(total - w, total)]


def in_flight(ops: list[Op]) -> int:
    held = most = 0
    for kind, *_ in ops:
        held += 1 if kind == "forward" else -1
        most = max(most, held)
    return most


# ---------------------------------------------------------------- messages


def stage_of(chunk: int, rank: int, p: int) -> int:
    return chunk * p + rank


def needs(op: Op, rank: int, p: int, v: int) -> tuple | None:
    """The message op waits for: (peer, (kind, stage it is for, micro-batch)), or None:
    a forward takes the previous stage's activation, a backward the next stage's gradient."""
    kind, mb, chunk = op
    s = stage_of(chunk, rank, p)
    if kind == "forward":
        return None if s == 0 else ((rank - 1) % p, ("act", s, mb))
    return None if s == p * v - 1 else ((rank + 1) % p, ("grad", s, mb))


def sends(op: Op, rank: int, p: int, v: int) -> tuple | None:
    """The message op produces: (peer, (kind, stage it is for, micro-batch)), or None."""
    kind, mb, chunk = op
    s = stage_of(chunk, rank, p)
    if kind == "forward":
        return None if s == p * v - 1 else ((rank + 1) % p, ("act", s + 1, mb))
    return None if s == 0 else ((rank - 1) % p, ("grad", s - 1, mb))


def steps(p: int, m: int, v: int, rank: int) -> list[list[Op]]:
    """The order cut into steps: each warm-up forward, each steady forward+backward pair,
    each cool-down backward."""
    ops, w = order(p, m, v, rank), warmup(p, m, v, rank)
    pairs = v * m - w
    return ([[op] for op in ops[:w]] + [ops[w + 2 * k:w + 2 * k + 2] for k in range(pairs)]
            + [[op] for op in ops[w + 2 * pairs:]])


def batches(p: int, m: int, v: int, rank: int) -> list[dict]:
    """The point-to-point batches rank r posts (Megatron's): before the first step the
    receives it needs; after each step, its sends and the next step's receives as one
    batch_isend_irecv - in the steady state an activation and a gradient each way."""
    cut = steps(p, m, v, rank)
    out = []
    for j in range(len(cut) + 1):
        sent = [sends(op, rank, p, v) for op in cut[j - 1]] if j else []
        wanted = [needs(op, rank, p, v) for op in cut[j]] if j < len(cut) else []
        out.append({"send": [x for x in sent if x], "recv": [x for x in wanted if x]})
    return out


def receive_waits(p: int, m: int, v: int, rank: int, batched: bool = True) -> int:
    """The waits for receives rank r makes in a step: with the receives of a step
    posted as one batch and waited for together (Megatron's, the hand-written
    schedule's), one per batch with a receive; posted one by one (PyTorch's schedule
    runtime: each RECV its own action), one per receive."""
    received = [len(b["recv"]) for b in batches(p, m, v, rank)]
    return sum(1 for n in received if n) if batched else sum(received)


def check_plan(p: int, m: int, v: int) -> str | None:
    """Simulate every rank's batches with nccl's rules - the k-th send from a to b meets
    the k-th receive on b from a, and a batch completes only when every message in it
    meets its counterpart in a batch its peer has posted (or has passed, which it did
    only once its side of that message was done) - and say what goes wrong:
    a message received as another (mismatch) or ranks waiting on each other (deadlock)."""
    plans = [batches(p, m, v, r) for r in range(p)]
    where: dict[tuple, list] = {}  # (src, dst, "send"|"recv") -> [(batch index, msg)]
    for r, plan in enumerate(plans):
        for i, b in enumerate(plan):
            for peer, msg in b["send"]:
                where.setdefault((r, peer, "send"), []).append((i, msg))
            for peer, msg in b["recv"]:
                where.setdefault((peer, r, "recv"), []).append((i, msg))
    waits: list[list[list[tuple[int, int]]]] = [[[] for _ in plan] for plan in plans]
    for (a, b, role), items in where.items():
        other = where.get((a, b, "recv" if role == "send" else "send"), [])
        if [x for _, x in items] != [x for _, x in other]:
            return f"messages {a}->{b}: sent {[x for _, x in items][:6]}, " \
                   f"received as {[x for _, x in other][:6]}"
        me, peer = (a, b) if role == "send" else (b, a)
        for (i, _), (j, _) in zip(items, other, strict=True):
            waits[me][i].append((peer, j))
    at = [0] * p
    while any(at[r] < len(plans[r]) for r in range(p)):
        ready = [r for r in range(p) if at[r] < len(plans[r])
                 and all(at[peer] >= j for peer, j in waits[r][at[r]])]
        if not ready:
            return f"deadlock: ranks at batches {at}"
        for r in ready:
            at[r] += 1
    return None


def messages(p: int, m: int, v: int, rank: int) -> Counter:
    """Sends and receives rank r makes in a step (each one micro-batch's activation or
    gradient): v times 1F1B's on a middle stage."""
    c: Counter = Counter()
    for op in order(p, m, v, rank):
        c["send"] += sends(op, rank, p, v) is not None
        c["recv"] += needs(op, rank, p, v) is not None
    return c


# ---------------------------------------------------------------- memory


def held_at_backwards(p: int, m: int, v: int, rank: int) -> list[dict]:
    """Before each backward of rank r: the (micro-batch, chunk) forwards whose activations
    it holds (this one's included), the messages it has sent (kept until the step ends)
    and the chunks whose gradients exist already."""
    ops, live, sent, graded, out = order(p, m, v, rank), [], Counter(), set(), []
    for op in ops:
        kind, mb, chunk = op
        if kind == "forward":
            live.append((mb, chunk))
        else:
            out.append({"op": op, "live": list(live), "sent": dict(sent),
                        "graded": set(graded)})
            live.remove((mb, chunk))
            graded.add(chunk)
        msg = sends(op, rank, p, v)
        if msg:
            sent[msg[1][0]] += 1
    return out
