"""Heartbeats the database could not take.

While another writer holds SQLite's write lock past the busy timeout, a runner's
heartbeat cannot renew its lease. The web then notes, in a file beside the run's log (no
lock needed), that the runner holding this lease epoch was heard; the reaper counts a
note newer than the stored lease as a renewal made at that time. So a run is lost only
when nobody heard its runner, never because the database was busy.
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

from app.journal.run_files import run_dir
from app.models import Run

NOTE = "heard"  # in the run's folder: the epoch heard; its mtime, when


def heard(data_dir: Path, run_id: int, epoch: int) -> None:
    """Note that the runner holding `epoch` of this run's lease was heard just now."""
    path = run_dir(data_dir, run_id) / NOTE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(str(epoch))


def last_heard(data_dir: Path, run: Run) -> dt.datetime | None:
    """When the run's current lease holder was last heard without being stored (naive
    UTC, as the database keeps times), or None."""
    path = run_dir(data_dir, run.id) / NOTE
    try:
        if path.read_text() != str(run.lease_epoch):
            return None  # an earlier lease's holder
        when = os.stat(path).st_mtime
    except (OSError, ValueError):
        return None
    return dt.datetime.fromtimestamp(when, dt.UTC).replace(tzinfo=None)
