"""A run's events as a Chrome Trace Event file (the JSON object form), for Perfetto and
chrome://tracing.

    pid   = rank ("rank 0", …), one process per rank
    tid   = a track of that rank: its steps, its compute (forward, backward, optimizer) and
            its communication. Slices must nest on a track, and asynchronous collectives
            overlap each other and a send overlaps its receive, so each group is spread
            over as many tracks as it needs ("comm", "comm 2", …): an event goes on the
            first track of its group that is free when it starts.
    X     one complete event per span, ts and dur in µs from the run's first event
    s / f a flow from each send to the receive that got it (rank_events.match_messages):
          s at the send's start, f ("bp": "e") inside the receive, no earlier than the s.
    M     process and thread names and sort order.

Times are kept in whole nanoseconds while tracks are assigned, so two spans that touch
never overlap through rounding.
"""

from __future__ import annotations

from app.journal.views.rank_events import Event, RunEvents, match_messages

GROUP_BASE = {"step": 0, "compute": 100, "comm": 200}  # tid = base + track number
GROUP_NAME = {"step": "steps", "compute": "compute", "comm": "comm"}
MAX_TRACKS = 64  # per group and rank; an event that finds none free is left out


def _ns(seconds: float, origin: float) -> int:
    return round((seconds - origin) * 1e9)


def slice_name(e: Event) -> str:
    if e.kind in ("forward", "backward") and e.mb is not None:
        return f"{'F' if e.kind == 'forward' else 'B'}{e.mb}"
    if e.kind in ("send", "recv") and e.peer is not None:
        return f"{e.kind} {'→' if e.kind == 'send' else '←'} rank {e.peer}"
    if e.kind == "step":
        return f"{e.strategy} step {e.step}"
    return e.kind


def event_args(e: Event) -> dict:
    args = {"strategy": e.strategy, "step": e.step, "kind": e.kind}
    for field in ("mb", "stage", "bytes", "peer", "dir", "bucket", "op"):
        value = getattr(e, field)
        if value is not None:
            args[field] = value
    if e.asynchronous:
        args["asynchronous"] = True
    return args


def assign_tracks(spans: list[tuple[int, int]], limit: int = MAX_TRACKS) -> list[int | None]:
    """For spans (start, end) in start order: the first track whose last span has ended
    (None when all `limit` tracks are busy)."""
    ends: list[int] = []
    out: list[int | None] = []
    for start, end in spans:
        free = next((i for i, last in enumerate(ends) if last <= start), None)
        if free is None and len(ends) < limit:
            ends.append(end)
            free = len(ends) - 1
        elif free is not None:
            ends[free] = end
        out.append(free)
    return out


def trace(found: RunEvents, other: dict) -> dict:
    """The trace of every event of a run; `other` goes into otherData."""
    origin = found.origin
    by_lane: dict[tuple[int, str], list[Event]] = {}
    for e in found.events:  # already in start order
        by_lane.setdefault((e.rank, e.track), []).append(e)
    out: list[dict] = []
    where: dict[int, tuple[int, int, int, int]] = {}  # id(event) → pid, tid, ts_ns, end_ns
    threads: set[tuple[int, int]] = set()
    for (rank, group), events in sorted(by_lane.items()):
        spans = [(_ns(e.t0, origin), _ns(e.t1, origin)) for e in events]
        for e, (start, end), track in zip(events, spans, assign_tracks(spans), strict=True):
            if track is None:
                continue
            tid = GROUP_BASE[group] + track
            threads.add((rank, tid))
            where[id(e)] = (rank, tid, start, end)
            out.append({"name": slice_name(e), "cat": e.strategy, "ph": "X", "pid": rank,
                        "tid": tid, "ts": start / 1000, "dur": (end - start) / 1000,
                        "args": event_args(e)})
    flows = 0
    for send, recv in match_messages(found.events):
        if id(send) not in where or id(recv) not in where:
            continue
        spid, stid, s_ts, _ = where[id(send)]
        rpid, rtid, r_ts, r_end = where[id(recv)]
        at = max((r_ts + r_end) // 2, s_ts)
        if at > r_end:  # the receive ended before the send began: no arrow to draw
            continue
        flows += 1
        common = {"name": "message", "cat": "p2p", "id": flows}
        out.append({**common, "ph": "s", "pid": spid, "tid": stid, "ts": s_ts / 1000})
        out.append({**common, "ph": "f", "bp": "e", "pid": rpid, "tid": rtid,
                    "ts": at / 1000})
    meta: list[dict] = []
    for rank in sorted({pid for pid, _ in threads}):
        meta.append({"name": "process_name", "ph": "M", "pid": rank, "tid": 0,
                     "args": {"name": f"rank {rank}"}})
        meta.append({"name": "process_sort_index", "ph": "M", "pid": rank, "tid": 0,
                     "args": {"sort_index": rank}})
    for rank, tid in sorted(threads):
        group = max((g for g, base in GROUP_BASE.items() if tid >= base),
                    key=GROUP_BASE.__getitem__)
        track = tid - GROUP_BASE[group]
        name = GROUP_NAME[group] + (f" {track + 1}" if track else "")
        meta.append({"name": "thread_name", "ph": "M", "pid": rank, "tid": tid,
                     "args": {"name": name}})
        meta.append({"name": "thread_sort_index", "ph": "M", "pid": rank, "tid": tid,
                     "args": {"sort_index": tid}})
    return {"traceEvents": meta + out, "displayTimeUnit": "ms",
            "otherData": {**other, "events": len(found), "flows": flows,
                          "skipped_lines": found.skipped, "truncated": found.truncated,
                          "clock": "ts: µs since the run's first event; each rank's "
                                   "clock moved by clock_offsets_ms so that no message "
                                   "arrives before it was sent and no collective ends "
                                   "before every rank began it",
                          "clock_offsets_ms": {str(r): round(off * 1e3, 6)
                                               for r, off in found.offsets.items()}}}
