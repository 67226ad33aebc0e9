"""How a run ended, in the journal's words. The lab's launcher has already classified it
(base/contract.py); this only forwards that, adding what the launcher cannot know."""

from __future__ import annotations

import json
import signal
from pathlib import Path

from base.contract import LAB_REASONS, RESULT_FILE, reason_for_exit
from base.statuses import CANCELLED, FAILED, SUCCEEDED


def read_result(lab_dir: Path) -> dict | None:
    try:
        return json.loads((lab_dir / RESULT_FILE).read_text())
    except (OSError, ValueError):
        return None


def outcome(rc: int, result: dict | None, cancelled: bool) -> tuple[str, str, str]:
    """(status, reason, reason_code) for the journal. The launcher classified the failure
    (result.json's reason; its exit code says the same when there is no result): this
    forwards it. Only what the launcher cannot know is decided here: that we cancelled
    the run, or that the launcher itself was killed."""
    reason = result.get("reason") if isinstance(result, dict) else None
    reason = reason if isinstance(reason, dict) else {}
    message = str(reason.get("message") or "")
    if rc == 0:
        return SUCCEEDED, "", ""
    code = reason.get("code") if reason.get("code") in LAB_REASONS else reason_for_exit(rc)
    if cancelled or code == "cancelled":
        return CANCELLED, "cancelled by the owner", "cancelled"
    if rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = str(-rc)
        return FAILED, message or f"the lab was killed by {name}", "signal"
    return FAILED, message or f"the lab exited with {rc}", code or "exit_code"
