"""Runners and the runs they can take: what a run needs of a host (GPUs, a GPU model),
whether a runner's labels offer it, and — asked when a run is submitted and while it
waits — whether any registered runner can take it at all, so a run nobody can serve is
answered at once instead of waiting a day to expire."""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa
from sqlalchemy.orm import Session

from app.errors import Invalid
from app.models import Runner, utcnow

# A runner heard from within this long is around (it polls every few seconds).
RECENT = dt.timedelta(minutes=10)
# How fresh `last_seen_at` is kept by an idle runner's long poll, which asks for work every
# half second: stamping each attempt made every idle runner commit twice a second, all day.
SEEN_RESOLUTION = dt.timedelta(seconds=10)


def seen(runner: Runner, now: dt.datetime) -> None:
    """Stamp the runner as heard from, unless it was within SEEN_RESOLUTION: a poll that
    finds no work then commits nothing."""
    if runner.last_seen_at is None or now - runner.last_seen_at >= SEEN_RESOLUTION:
        runner.last_seen_at = now


def requirements(params: dict, asked: dict | None = None, nodes: int = 1) -> dict:
    """What kind of host a run needs: a CUDA run needs one GPU per rank on each of its
    `nodes` hosts; the owner may also name a GPU model (matched as a substring of the
    runner's gpu_model label)."""
    needs: dict = {}
    if params.get("device") == "cuda":
        needs["gpu_count"] = int(params.get("world_size", 1)) // nodes
    asked = asked or {}
    if not isinstance(asked, dict) or set(asked) - {"gpu_model", "gpu_count"}:
        raise Invalid("requires may name gpu_model and gpu_count", "requires")
    model = asked.get("gpu_model")
    if model is not None:
        if not isinstance(model, str) or not 0 < len(model) <= 60:
            raise Invalid("requires.gpu_model is a short name such as 'H100'", "requires")
        needs["gpu_model"] = model
    count = asked.get("gpu_count")
    if count is not None:
        if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= 64:
            raise Invalid("requires.gpu_count is a whole number from 0 to 64", "requires")
        needs["gpu_count"] = max(count, needs.get("gpu_count", 0))
    return needs



def matches(requires: dict, labels: dict) -> bool:
    need = int(requires.get("gpu_count", 0) or 0)
    if need and int(labels.get("gpu_count", 0) or 0) < need:
        return False
    model = requires.get("gpu_model")
    return not model or model.lower() in str(labels.get("gpu_model", "")).lower()


def describe(requires: dict) -> str:
    """What a run needs, in words: "2 GPUs", "a GPU matching 'H200'"."""
    parts = []
    if requires.get("gpu_count"):
        n = int(requires["gpu_count"])
        parts.append(f"{n} GPU{'s' if n != 1 else ''}")
    if requires.get("gpu_model"):
        parts.append(f"a GPU matching {requires['gpu_model']!r}")
    return " and ".join(parts) or "nothing special"


def offers(labels: dict) -> str:
    count = int(labels.get("gpu_count", 0) or 0)
    model = labels.get("gpu_model")
    return f"{count} GPU{'s' if count != 1 else ''}" + (f" ({model})" if model and count else "")


def _ago(moment: dt.datetime | None, now: dt.datetime) -> str:
    if moment is None:
        return "never"
    seconds = int((now - moment).total_seconds())
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size:
            n = seconds // size
            return f"{n} {unit}{'s' if n != 1 else ''} ago"
    return "just now"


def availability(session: Session, requires: dict,
                 now: dt.datetime | None = None) -> tuple[bool, str]:
    """(some registered runner can take it, what the owner should know — "" if all is
    well). False only when runners are registered and none has what the run needs."""
    now = now or utcnow()
    known = list(session.scalars(sa.select(Runner).order_by(Runner.name)))
    if not known:
        return True, ("no runner has registered yet: the run waits until one does "
                      "(`commonplace up` starts one; on a GPU host, `commonplace runner`)")
    able = [r for r in known if matches(requires, r.labels or {})]
    if not able:
        offered = ", ".join(f"{r.name} has {offers(r.labels or {})}" for r in known[:5])
        return False, f"no registered runner has {describe(requires)} ({offered})"
    seen = max(able, key=lambda r: r.last_seen_at or dt.datetime.min)
    if seen.last_seen_at is None or now - seen.last_seen_at > RECENT:
        return True, (f"the last runner that can take it ({seen.name}) was seen "
                      f"{_ago(seen.last_seen_at, now)}")
    return True, ""
