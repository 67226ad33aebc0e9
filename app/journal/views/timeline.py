"""One step of one strategy, rank by rank, as the lab measured it: what each rank
computed, what it sent and received, and where its idle time went.

A rank's step is its own "step" span. Inside it, the union of its compute spans
(forward, backward, optimizer, PyTorch's schedule) is busy; the rest is idle, cut into
pieces and attributed, in this order:

    warm-up            before the rank's first compute span (a pipeline's fill)
    waiting on rank k  a receive from k is open (or a send to k during which this rank
                       computed nothing, i.e. one it waited for)
    in <collective>    an all_reduce, all_gather, … is open
    other              none of these: the host between spans (Python, launches)

so busy + the idle pieces = the step, on every rank. The bubble is the lab's measure
(jobs/lab/experiments/training.py): 1 − (forward + backward time) / step time, per rank;
for the strategy, the median over its timed steps per rank, averaged over the ranks,
which is what result.json records as bubble.measured_idle_fraction.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from app.journal.views.ideal_schedule import ORDERS, Ideal, simulate
from app.journal.views.rank_events import COLLECTIVES, Event, RunEvents, match_messages
from app.journal.views.trace import assign_tracks

MAX_COMM_LANES = 8


@dataclass
class Piece:
    """A drawn span, in seconds from the view's start: an event, or idle time."""
    kind: str  # an event's kind, or "idle"
    t0: float
    t1: float
    event: Event | None = None
    lane: int = 0  # comm spans: which of the rank's comm lanes
    cause: str = ""  # idle: warm-up, wait, collective, other
    label: str = ""  # idle: "warm-up", "waiting on rank 1", "in all_reduce", "other"


@dataclass
class RankLane:
    rank: int
    stage: int | None
    t0: float
    t1: float
    compute: list[Piece] = field(default_factory=list)
    comm: list[Piece] = field(default_factory=list)
    idle: list[Piece] = field(default_factory=list)
    comm_lanes: int = 0
    busy_s: float = 0.0
    forward_backward_s: float = 0.0
    has_step: bool = False

    @property
    def span_s(self) -> float:
        return self.t1 - self.t0

    @property
    def idle_by(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for piece in self.idle:
            out[piece.label] = out.get(piece.label, 0.0) + piece.t1 - piece.t0
        return out

    @property
    def bubble(self) -> float | None:
        if not self.has_step or self.forward_backward_s <= 0 or self.span_s <= 0:
            return None
        return 1 - self.forward_backward_s / self.span_s


@dataclass
class StepView:
    strategy: str
    step: int | str
    start: float  # absolute, on the lab's clock
    end: float
    ranks: list[RankLane]
    arrows: list[tuple[Piece, Piece]]  # (send, recv) pieces
    ideal: Ideal | None
    ideal_start: float  # seconds from the view's start where the ideal's slot 0 begins

    @property
    def duration(self) -> float:
        return self.end - self.start

    @property
    def bubble(self) -> float | None:
        values = [r.bubble for r in self.ranks if r.bubble is not None]
        return statistics.mean(values) if values else None


def _union(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def _cause(mid: float, covers: list[tuple[float, float, int, str, str]],
           warm_until: float) -> tuple[str, str]:
    if mid < warm_until:
        return "warm-up", "warm-up"
    best = min((c for c in covers if c[0] <= mid < c[1]), key=lambda c: (c[2], c[4]),
               default=None)
    return (best[3], best[4]) if best else ("other", "other")


def attribute(t0: float, t1: float, busy: list[tuple[float, float]], covers,
              warm_until: float) -> list[Piece]:
    """The idle pieces of [t0, t1] outside `busy` (a sorted union), each with its cause.
    covers: (start, end, priority, cause, label) of what was open meanwhile."""
    gaps, at = [], t0
    for a, b in busy:
        if a > at:
            gaps.append((at, min(a, t1)))
        at = max(at, b)
    if at < t1:
        gaps.append((at, t1))
    pieces: list[Piece] = []
    for g0, g1 in gaps:
        if g1 <= g0:
            continue
        inside = [c for c in covers if c[0] < g1 and c[1] > g0]
        cuts = sorted({g0, g1, *(x for c in inside for x in c[:2] if g0 < x < g1),
                       *([warm_until] if g0 < warm_until < g1 else [])})
        for a, b in zip(cuts, cuts[1:], strict=False):
            cause, label = _cause((a + b) / 2, inside, warm_until)
            if pieces and pieces[-1].label == label and pieces[-1].t1 == a:
                pieces[-1].t1 = b
            else:
                pieces.append(Piece("idle", a, b, cause=cause, label=label))
    return pieces


def _covers(evs: list[Event], compute: list[Event]) -> list[tuple]:
    """What was open on a rank, for the idle pieces: receives first, then collectives,
    then sends this rank waited for (no compute started while they were open)."""
    out = []
    for e in evs:
        if e.kind == "recv" and e.peer is not None:
            out.append((e.t0, e.t1, 0, "wait", f"waiting on rank {e.peer}"))
        elif e.kind in COLLECTIVES:
            out.append((e.t0, e.t1, 1, "collective", f"in {e.kind}"))
        elif (e.kind == "send" and e.peer is not None
              and not any(e.t0 < c.t0 < e.t1 for c in compute)):
            out.append((e.t0, e.t1, 2, "wait", f"waiting on rank {e.peer}"))
    return out


def rank_lane(rank: int, evs: list[Event], origin: float) -> RankLane:
    steps = [e for e in evs if e.kind == "step"]
    t0 = steps[0].t0 if steps else min(e.t0 for e in evs)
    t1 = steps[0].t1 if steps else max(e.t1 for e in evs)
    compute = [e for e in evs if e.track == "compute"]
    comm = [e for e in evs if e.track == "comm"]
    stage = next((e.stage for e in compute if e.stage is not None), None)
    lane = RankLane(rank, stage, t0 - origin, t1 - origin, has_step=bool(steps))
    lane.compute = [Piece(e.kind, e.t0 - origin, e.t1 - origin, e) for e in compute]
    spans = [(round(e.t0 * 1e9), round(e.t1 * 1e9)) for e in comm]
    tracks = assign_tracks(spans, MAX_COMM_LANES)
    lane.comm = [Piece(e.kind, e.t0 - origin, e.t1 - origin, e, lane=track)
                 for e, track in zip(comm, tracks, strict=True) if track is not None]
    lane.comm_lanes = max((p.lane + 1 for p in lane.comm), default=0)
    busy = _union([(max(e.t0, t0), min(e.t1, t1)) for e in compute if e.t1 > t0 and e.t0 < t1])
    lane.busy_s = sum(b - a for a, b in busy)
    lane.forward_backward_s = sum(e.t1 - e.t0 for e in compute
                                  if e.kind in ("forward", "backward"))
    warm_until = busy[0][0] if busy else t1
    lane.idle = [Piece("idle", p.t0 - origin, p.t1 - origin, cause=p.cause, label=p.label)
                 for p in attribute(t0, t1, busy, _covers(comm, compute), warm_until)]
    return lane


def _ideal(strategy: str, ranks: list[RankLane]) -> Ideal | None:
    """The textbook schedule at this step's mean forward and backward times."""
    order = ORDERS.get(strategy)
    fwd = [p for r in ranks for p in r.compute if p.kind == "forward"]
    bwd = [p for r in ranks for p in r.compute if p.kind == "backward"]
    if order is None or not fwd or not bwd:
        return None
    m = max(len({p.event.mb for p in r.compute if p.kind == "forward"}) for r in ranks)
    return simulate(order, len(ranks), m, statistics.mean(p.t1 - p.t0 for p in fwd),
                    statistics.mean(p.t1 - p.t0 for p in bwd))


def step_view(found: RunEvents, strategy: str, step: int | str) -> StepView | None:
    evs = found.step_events(strategy, step)
    if not evs:
        return None
    by_rank: dict[int, list[Event]] = {}
    for e in evs:
        by_rank.setdefault(e.rank, []).append(e)
    starts = [min((x.t0 for x in v if x.kind == "step"), default=min(x.t0 for x in v))
              for v in by_rank.values()]
    origin = min(starts)
    ranks = [rank_lane(rank, by_rank[rank], origin) for rank in sorted(by_rank)]
    end = origin + max(r.t1 for r in ranks)
    piece_of = {id(p.event): p for r in ranks for p in r.comm}
    arrows = [(piece_of[id(s)], piece_of[id(r)]) for s, r in match_messages(evs)
              if id(s) in piece_of and id(r) in piece_of]
    ideal = _ideal(strategy, ranks)
    first = min((p.t0 for r in ranks for p in r.compute if p.kind == "forward"), default=0.0)
    return StepView(strategy, step, origin, end, ranks, arrows, ideal, first)


def step_duration(found: RunEvents, strategy: str, step: int) -> float:
    """The step's time: its slowest rank's step span."""
    spans = [e.t1 - e.t0 for e in found.step_events(strategy, step) if e.kind == "step"]
    return max(spans, default=0.0)


def median_step(found: RunEvents, strategy: str) -> int | None:
    steps = found.timed_steps(strategy)
    if not steps:
        return None
    ordered = sorted(steps, key=lambda s: (step_duration(found, strategy, s), s))
    return ordered[(len(ordered) - 1) // 2]


def measured_bubble(found: RunEvents, strategy: str) -> tuple[float | None, list[float]]:
    """The lab's bubble over the timed steps: per rank the median of 1 − (F+B)/step,
    a rank without a step span or without forward/backward time in some step has none;
    (mean over the ranks that have one, those per-rank values)."""
    steps = found.timed_steps(strategy)
    per_rank = []
    for rank in found.ranks(strategy):
        fractions = []
        for i in steps:
            mine = [e for e in found.step_events(strategy, i) if e.rank == rank]
            span = next((e.t1 - e.t0 for e in mine if e.kind == "step"), None)
            busy = sum(e.t1 - e.t0 for e in mine if e.kind in ("forward", "backward"))
            if span is None or busy == 0 or span <= 0:
                fractions = []
                break
            fractions.append(1 - busy / span)
        if fractions:
            per_rank.append(statistics.median(fractions))
    return (statistics.mean(per_rank) if per_rank else None), per_rank
