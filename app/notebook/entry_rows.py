"""Entries as the reading pages and the API show them: plain rows, not ORM objects.

Reading is almost all of what the notebook serves, and through the ORM every entry read
builds an identity-mapped, instrumented object that the page only looks at: a profile of
the entry page found the request spending far more in SQLAlchemy's ORM than in SQLite
itself (docs/PERFORMANCE.md, *Reading an entry*).

So the reads here select the columns a page shows with SQLAlchemy Core, on the request
session's own connection (the same transaction: one page sees one snapshot); the ones a
page runs on every view are built and compiled once (app/db.py's Prepared). They return
EntryRow: a named tuple that reads like an Entry (`tag_list` included), so templates and
the JSON API take either. Nothing here writes; a form that changes an entry loads the
ORM object through entries.get.
"""

from __future__ import annotations

import datetime as dt
from typing import NamedTuple

import sqlalchemy as sa
from sqlalchemy.orm import Session

from app.db import Prepared
from app.errors import NotFound
from app.models import Entry, all_tags


class EntryRow(NamedTuple):
    id: int
    kind: str
    date: dt.date
    iso_week: str
    title: str
    slug: str
    tags: str
    body_tags: str
    status: str
    revision: int
    created_at: dt.datetime
    updated_at: dt.datetime
    body_md: str = ""  # only `read` fills the bodies: a list shows titles, never text
    body_html: str = ""
    toc_html: str = ""
    publish: bool = False  # like the bodies, only `read` fills it
    front_matter: str | None = None  # like the bodies (mirror.to_text writes it)

    @property
    def tag_list(self) -> list[str]:
        return self.tags.split()

    @property
    def all_tags(self) -> list[str]:
        return all_tags(self.tags, self.body_tags)


# What a list shows (every column but the bodies), and a whole entry: in EntryRow's order.
LISTED = (Entry.id, Entry.kind, Entry.date, Entry.iso_week, Entry.title, Entry.slug,
          Entry.tags, Entry.body_tags, Entry.status, Entry.revision, Entry.created_at,
          Entry.updated_at)
WHOLE = (*LISTED, Entry.body_md, Entry.body_html, Entry.toc_html, Entry.publish,
         Entry.front_matter)
assert [c.key for c in WHOLE] == list(EntryRow._fields)

ONE = Prepared(sa.select(*WHOLE).where(Entry.id == sa.bindparam("id")))


def rows(session: Session, query: Prepared | sa.Select,
         params: dict | None = None) -> list[EntryRow]:
    """`query` (selecting LISTED or WHOLE) run on the session's connection, as EntryRows."""
    found = (query.run(session, params) if isinstance(query, Prepared)
             else session.connection().execute(query, params))
    return [EntryRow(*row) for row in found]


def read(session: Session, entry_id: int) -> EntryRow:
    """One entry, bodies included, or NotFound."""
    found = ONE.run(session, {"id": entry_id})
    if not found:
        raise NotFound(f"no entry {entry_id}")
    return EntryRow(*found[0])
