"""What the current request's identity may see and change, as the pages and the JSON API
both ask it. Who the identity is, and whether it may call a route at all, is decided
before any view runs (app/web/auth); this is the finer grain inside a view: drafts are
the owner's, and a form that only leads to a write is for owners too.
"""

from __future__ import annotations

from flask import abort, g

from app.db import get_reader, get_session
from app.errors import NotFound
from app.models import Entry, Revision
from app.notebook import browse, entries, entry_rows
from app.notebook.entry_rows import EntryRow


def can_write() -> bool:
    identity = g.get("identity")  # once: each look through the `g` proxy costs 3 calls
    return identity is not None and identity.can_write


def require_owner() -> None:
    """Pages that only lead to a write (forms) are for owners; viewers get a clear 403."""
    if not can_write():
        abort(403, description="read-only access: only the notebook's owners can change it")


def visible(entry: Entry | EntryRow) -> bool:
    return entry.status == "published" or can_write()


def visible_entry(entry_id: int) -> Entry:
    """The entry, or NotFound: a draft does not exist for someone who cannot write."""
    entry = entries.get(get_session(), entry_id)
    if not visible(entry):
        raise NotFound(f"no entry {entry_id}")
    return entry


def readable_entry(entry_id: int) -> EntryRow:
    """visible_entry for pages that only show it: a row (app/notebook/entry_rows.py), not
    the ORM object a form changes."""
    entry = entry_rows.read(get_reader(), entry_id)
    if not visible(entry):
        raise NotFound(f"no entry {entry_id}")
    return entry


def visible_revisions(entry: Entry) -> list[Revision]:
    """An entry's revisions, newest first, as this identity may see them: a revision saved
    as a draft is the owner's, like the draft itself, even after the entry is published."""
    revisions = browse.revisions(get_session(), entry)
    if can_write():
        return revisions
    return [rev for rev in revisions if rev.status == "published"]


def visible_revision(entry: Entry, number: int) -> Revision:
    """One revision, or NotFound: a draft revision does not exist for a reader."""
    rev = browse.revision(get_session(), entry, number)
    if rev.status != "published" and not can_write():
        raise NotFound(f"entry {entry.id} has no revision {number}")
    return rev


def author() -> str:
    """Who a save or a run is recorded as."""
    return g.identity.login
