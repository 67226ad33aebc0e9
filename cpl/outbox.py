"""The offline capture queue. A capture (`cpl note`) that cannot reach the server is kept
here, one JSON file per capture under the state dir, and sent later: by the next
`cpl note`, `cpl login` or `cpl queue flush`. Only captures are queued (creating an entry
is safe to repeat with a key; an edit is not: a failed edit becomes a draft instead).

Each capture gets its Idempotency-Key when it is made, and keeps it for every send: if an
answer is lost on the way, the next send gets the same entry back from the server, never
a second one. A file is removed only after the server has answered for it.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

from base.durable import write_private
from cpl.api_client import Api
from cpl.failures import ApiError, Unreachable
from cpl.profile import outbox_dir

HEADER = "Idempotency-Key"


@dataclass
class Capture:
    key: str  # the Idempotency-Key, a UUID
    created_at: str
    server: str
    fields: dict  # the POST /api/v1/entries body
    tries: int = 0
    last_error: str = ""

    @property
    def path(self) -> Path:
        return outbox_dir() / f"{self.created_at.replace(':', '')}-{self.key}.json"

    def save(self) -> None:
        write_private(self.path, json.dumps(asdict(self), indent=1))


def new_capture(server: str, fields: dict) -> Capture:
    stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return Capture(key=str(uuid.uuid4()), created_at=stamp, server=server, fields=fields)


def queued() -> list[Capture]:
    """Waiting captures, oldest first (file names start with the time they were made)."""
    found = []
    for path in sorted(outbox_dir().glob("*.json")):
        try:
            found.append(Capture(**json.loads(path.read_text(encoding="utf-8"))))
        except (OSError, ValueError, TypeError):
            continue  # a file we cannot read stays where it is, for a person to look at
    return found


def send(api: Api, capture: Capture) -> tuple[dict, bool]:
    """POST one capture with its key: (the entry, whether the server had it already)."""
    status, entry, _ = api.call("POST", "/api/v1/entries", capture.fields,
                                headers={HEADER: capture.key})
    return entry, status == 200


@dataclass
class Drained:
    sent: list[tuple[Capture, dict, bool]]  # capture, entry, was a replay
    refused: list[tuple[Capture, str]]  # kept in the queue with the reason
    gone: list[Capture]  # the server made its entry, which was deleted since
    offline: str = ""  # why the rest stayed queued


def drain(api: Api) -> Drained:
    """Send every waiting capture for this server, oldest first. Stops at the first
    network failure (the rest wait); a refusal (a bad date, say) keeps that capture with
    the reason and goes on; an auth refusal stops, since every other would fail too."""
    report = Drained([], [], [])
    for capture in queued():
        if capture.server != api.server:
            continue
        try:
            entry, replayed = send(api, capture)
        except Unreachable as exc:
            _failed(capture, exc.message)
            report.offline = exc.message
            break
        except ApiError as exc:
            if exc.status == 410:
                capture.path.unlink(missing_ok=True)
                report.gone.append(capture)
                continue
            if exc.status >= 500:
                _failed(capture, exc.message)
                report.offline = exc.message
                break
            _failed(capture, exc.message)
            report.refused.append((capture, exc.message))
            if exc.status in (401, 403):
                break
            continue
        capture.path.unlink(missing_ok=True)
        report.sent.append((capture, entry, replayed))
    return report


def _failed(capture: Capture, why: str) -> None:
    capture.tries += 1
    capture.last_error = why
    if capture.path.exists():
        capture.save()


def drop(key_prefix: str) -> list[Capture]:
    """Remove the waiting captures whose key starts with `key_prefix`."""
    gone = [c for c in queued() if c.key.startswith(key_prefix)]
    for capture in gone:
        capture.path.unlink(missing_ok=True)
    return gone
