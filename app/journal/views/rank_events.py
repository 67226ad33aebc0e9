"""A run's per-rank events (the lab's events.jsonl artifact), read once and kept.

Every line the lab writes is one span on one rank, on a clock all ranks share:

    {"rank": 0, "strategy": "gpipe", "step": 3, "kind": "forward", "t0": 9.60, "t1": 9.62,
     "mb": 0, "stage": 0}

A runner uploads this file, so nothing in it is trusted: a line that is not a JSON object
with the right types is skipped, an optional field of the wrong type is dropped, and at
most MAX_EVENTS are kept. Parsing megabytes on every page view would be slow, so the
parsed file is cached, keyed by its path, modification time and size (a new upload of the
same name is a new key).

`match_messages` pairs each send with the receive that got it: between one sender and one
receiver messages arrive in the order they were posted (MPI's non-overtaking rule, which
gloo and nccl keep), so the k-th send from r to p in a step is the k-th receive on p from r.

The lab puts every rank on rank 0's clock (jobs/lab/components/clocks.py: exactly on one
host, to within a measured error across hosts; older runs took each rank's origin as it
left a barrier, milliseconds apart on a busy host). `clock_offsets` checks what the events
themselves say, as NTP does: a receive cannot end before its send began, and a collective
cannot end on any rank before it began on every rank of its group; each bounds the
difference between two ranks' clocks from one side. A rank whose clock already lies
within those bounds keeps it; one outside is moved to the nearest bound (the middle, when
the bounds contradict each other). Ranks that share no message or collective keep their
clock.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections import defaultdict
from pathlib import Path
from typing import NamedTuple

from sqlalchemy.orm import Session

from app.errors import NotFound
from app.journal.run_files import find_artifact
from base.contract import EVENTS_FILE

MAX_EVENTS = 100_000
MAX_LINE = 4096  # bytes; the lab's lines are about 150
MAX_RANK = 4096
MAX_TIME = 1e7  # seconds since the lab's origin (about 115 days)
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
WORD_RE = re.compile(r"^[A-Za-z0-9_/-]{1,32}$")

COMPUTE = ("forward", "backward", "optimizer", "schedule")
P2P = ("send", "recv")
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all")


class Event(NamedTuple):
    rank: int
    strategy: str
    step: int | str  # timed steps >= 0, warm-up < 0; "gate", "census", "memory"
    kind: str
    t0: float
    t1: float
    mb: int | None = None
    stage: int | None = None
    bytes: int | None = None
    peer: int | None = None
    dir: str | None = None
    bucket: int | None = None
    op: str | None = None
    asynchronous: bool = False
    group: str | None = None  # a collective's group ("0-1"): its k-th call is every member's

    @property
    def track(self) -> str:
        """Where the event is drawn: "step", "compute" or "comm"."""
        if self.kind == "step":
            return "step"
        return "comm" if self.kind in P2P or self.kind in COLLECTIVES else "compute"


def _int(value, low: int, high: int) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        return None
    return value


def _time(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    value = float(value)
    return value if math.isfinite(value) and abs(value) <= MAX_TIME else None


def _word(value) -> str | None:
    return value if isinstance(value, str) and WORD_RE.match(value) else None


def parse_line(line: str | bytes) -> Event | None:
    """One line → an Event, or None when it is not one."""
    if len(line) > MAX_LINE:
        return None
    try:
        raw = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(raw, dict):
        return None
    rank = _int(raw.get("rank"), 0, MAX_RANK - 1)
    strategy, kind = raw.get("strategy"), _word(raw.get("kind"))
    step = raw.get("step")
    step = _int(step, -10**6, 10**6) if not isinstance(step, str) else _word(step)
    t0, t1 = _time(raw.get("t0")), _time(raw.get("t1"))
    if (rank is None or not isinstance(strategy, str) or not NAME_RE.match(strategy)
            or kind is None or step is None or t0 is None or t1 is None or t1 < t0):
        return None
    return Event(rank, strategy, step, kind, t0, t1,
                 mb=_int(raw.get("mb"), 0, 10**6), stage=_int(raw.get("stage"), 0, MAX_RANK),
                 bytes=_int(raw.get("bytes"), 0, 2**53), peer=_int(raw.get("peer"), 0,
                                                                     MAX_RANK - 1),
                 dir=_word(raw.get("dir")), bucket=_int(raw.get("bucket"), 0, 10**6),
                 op=_word(raw.get("op")), asynchronous=raw.get("asynchronous") is True,
                 group=_word(raw.get("group")))


MAX_DERIVED = 32


class RunEvents:
    """The parsed events of one run, sorted by start time, grouped for the views.
    Shared between requests by the cache: treat it as read-only."""

    def __init__(self, events: list[Event], skipped: int, truncated: bool) -> None:
        self.offsets = clock_offsets(events)
        events = [e._replace(t0=e.t0 + self.offsets[e.rank], t1=e.t1 + self.offsets[e.rank])
                  if self.offsets.get(e.rank) else e for e in events]
        self.events = tuple(sorted(events, key=lambda e: (e.t0, e.rank)))
        self.skipped, self.truncated = skipped, truncated
        self.origin = self.events[0].t0 if self.events else 0.0
        groups: dict[tuple[str, int | str], list[Event]] = defaultdict(list)
        for e in self.events:
            groups[(e.strategy, e.step)].append(e)
        self.groups = {key: tuple(evs) for key, evs in groups.items()}
        self.strategies = tuple(dict.fromkeys(e.strategy for e in self.events))
        self._derived: dict = {}

    def derived(self, key, make):
        """What a view makes of these events (a trace file, a page's timeline), made once
        per key while this version of the file is cached: parsed once was not enough, as
        building the views of megabytes of events took seconds on every view."""
        try:
            return self._derived[key]
        except KeyError:
            pass
        value = make()
        if len(self._derived) >= MAX_DERIVED:  # keys carry query arguments: keep it small
            self._derived.clear()
        self._derived[key] = value
        return value

    def __len__(self) -> int:
        return len(self.events)

    def step_events(self, strategy: str, step: int | str) -> tuple[Event, ...]:
        return self.groups.get((strategy, step), ())

    def timed_steps(self, strategy: str) -> list[int]:
        """The strategy's timed steps (integers ≥ 0; warm-up steps are negative)."""
        return sorted(step for (name, step) in self.groups
                      if name == strategy and isinstance(step, int) and step >= 0)

    def ranks(self, strategy: str | None = None) -> list[int]:
        return sorted({e.rank for e in self.events if strategy in (None, e.strategy)})


def parse(lines) -> RunEvents:
    events: list[Event] = []
    skipped, truncated = 0, False
    for line in lines:
        if not line.strip():
            continue
        event = parse_line(line)
        if event is None:
            skipped += 1
        elif len(events) >= MAX_EVENTS:
            truncated = True
            break
        else:
            events.append(event)
    return RunEvents(events, skipped, truncated)


@functools.lru_cache(maxsize=8)
def _load(path: str, mtime_ns: int, size: int) -> RunEvents:
    with open(path, "rb") as fh:
        return parse(fh)


def load(path: Path) -> RunEvents:
    """The events of a file, parsed at most once per version of it."""
    stat = path.stat()
    return _load(str(path), stat.st_mtime_ns, stat.st_size)


def run_events(data_dir: Path, session: Session, run_id: int) -> RunEvents | None:
    """The run's events, or None when it has no events.jsonl (or nothing in it parses)."""
    try:
        _row, path = find_artifact(Path(data_dir), session, run_id, EVENTS_FILE)
        found = load(path)
    except (NotFound, OSError):
        return None
    return found if len(found) else None


def match_messages(events) -> list[tuple[Event, Event]]:
    """(send, recv) pairs among `events`: per (strategy, step, sender, receiver), the k-th
    send posted is the k-th receive posted. Unpaired ones are left out."""
    sends: dict[tuple, list[Event]] = defaultdict(list)
    recvs: dict[tuple, list[Event]] = defaultdict(list)
    for e in events:
        if e.peer is None or e.peer == e.rank:
            continue
        if e.kind == "send":
            sends[(e.strategy, e.step, e.rank, e.peer)].append(e)
        elif e.kind == "recv":
            recvs[(e.strategy, e.step, e.peer, e.rank)].append(e)
    pairs = []
    for key, posted in sends.items():
        got = sorted(recvs.get(key, ()), key=lambda e: e.t0)
        pairs.extend(zip(sorted(posted, key=lambda e: e.t0), got, strict=False))
    return pairs


MAX_GROUP = 64  # ranks in a collective whose pairs bound the clocks (pairs grow as n²)


def match_collectives(events) -> list[tuple[Event, ...]]:
    """Each collective call as the events of every rank in it: per (strategy, step, kind,
    group), the k-th call on one rank is the k-th on every other. A group whose ranks
    recorded different numbers of calls in a step (a file cut short) is left out."""
    calls: dict[tuple, dict[int, list[Event]]] = defaultdict(lambda: defaultdict(list))
    for e in events:
        if e.kind in COLLECTIVES and e.group is not None:
            calls[(e.strategy, e.step, e.kind, e.group)][e.rank].append(e)
    out = []
    for by_rank in calls.values():
        lists = [sorted(evs, key=lambda e: e.t0) for evs in by_rank.values()]
        if len(lists) < 2 or len(lists) > MAX_GROUP or len({len(x) for x in lists}) > 1:
            continue
        out.extend(zip(*lists, strict=True))
    return out


def clock_offsets(events) -> dict[int, float]:
    """Seconds to add to each rank's times so that no message arrives before it was sent
    and no collective ends before every rank began it (the lowest rank's clock is the
    reference; see the module's docstring)."""
    # A message r → p: offset_p − offset_r ≥ low[(r, p)] = its send's start − its receive's
    # end; so offset_b − offset_a lies in [low[(a, b)], −low[(b, a)]]. A collective is a
    # message from each of its ranks to each other.
    low: dict[tuple[int, int], float] = {}
    pairs = list(match_messages(events))
    for call in match_collectives(events):
        pairs.extend((a, b) for a in call for b in call if a.rank != b.rank)
    for send, recv in pairs:
        key = (send.rank, recv.rank)
        low[key] = max(low.get(key, -math.inf), send.t0 - recv.t1)
    ranks = sorted({e.rank for e in events})
    offsets = {rank: 0.0 for rank in ranks}
    seen: set[int] = set()
    for root in ranks:  # each group of ranks that exchange messages, from its lowest
        if root in seen:
            continue
        seen.add(root)
        todo = [root]
        while todo:
            a = todo.pop()
            for b in ranks:
                if b in seen or ((a, b) not in low and (b, a) not in low):
                    continue
                lo, hi = low.get((a, b), -math.inf), -low.get((b, a), -math.inf)
                if lo > hi:
                    gap = (lo + hi) / 2  # no offset fits both: the least wrong
                else:
                    gap = min(max(0.0, lo), hi)  # the clock as the lab left it, if it fits
                offsets[b] = offsets[a] + gap
                seen.add(b)
                todo.append(b)
    return offsets
