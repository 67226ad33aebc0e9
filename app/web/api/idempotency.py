"""`Idempotency-Key` on POST /api/v1/entries: a client that is not sure its capture
arrived (the answer was lost, the terminal client's offline queue sends it again) repeats
the request with the same key and gets the entry the first request made, never a second
one. The shape follows the IETF httpapi draft and Stripe: the key names one request; the
same key with another body is refused (422); a replay answers 200 with
`Idempotent-Replayed: true`.

The key is looked up and stored inside the request's write session, whose first statement
takes SQLite's write lock, so two copies of one request arriving together are serialised:
the second finds the first's key. (On a server without that lock the key's primary key
refuses the second insert, and the view answers with the first's entry.)
"""

from __future__ import annotations

import hashlib
import json
import re

from flask import request
from sqlalchemy.orm import Session

from app.errors import Invalid, Refusal
from app.models import Entry, IdempotencyKey

HEADER = "Idempotency-Key"
KEY_RE = re.compile(r"^[A-Za-z0-9_.:-]{1,200}$")  # a UUID fits; so does "capture:<uuid>"


class Gone(Refusal):
    """The entry a key made has been deleted since: a replay must not bring it back."""

    status = 410
    code = "gone"


def requested_key() -> str | None:
    """The request's Idempotency-Key, checked; None when it sent none."""
    raw = request.headers.get(HEADER)
    if raw is None:
        return None
    if not KEY_RE.match(raw):
        raise Invalid(f"{HEADER} is 1 to 200 letters, digits and _.:- (a UUID will do)",
                      HEADER)
    return raw


def fingerprint(data: dict) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, ensure_ascii=False,
                                     separators=(",", ":")).encode()).hexdigest()


def replay(session: Session, key: str, data: dict) -> Entry | None:
    """The entry an earlier request with this key made, or None if the key is new."""
    row = session.get(IdempotencyKey, key)
    if row is None:
        return None
    if row.fingerprint != fingerprint(data):
        raise Invalid(f"this {HEADER} was used for a different request; a new request "
                      "needs a new key", HEADER)
    entry = session.get(Entry, row.entry_id) if row.entry_id is not None else None
    if entry is None:
        raise Gone(f"the entry made with this {HEADER} has been deleted since")
    return entry


def remember(session: Session, key: str, data: dict, entry: Entry, author: str) -> None:
    """Record that `key` made `entry`, in the same transaction as the entry itself."""
    session.add(IdempotencyKey(key=key, fingerprint=fingerprint(data), entry_id=entry.id,
                               author=author))
