"""Browsing the notebook: an entry's history, what links to it, its neighbours by date,
recent entries, tags and years. Read-only queries; the pages and the API call these.
Queries on every entry page are built once at import (their SQL compiles once)."""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.orm import Session

from app.errors import NotFound
from app.models import Entry, EntryTag, Link, Revision
from app.notebook.entries import keys_of


def revisions(session: Session, entry: Entry) -> list[Revision]:
    return list(
        session.scalars(
            sa.select(Revision).where(Revision.entry_id == entry.id)
            .order_by(Revision.number.desc())
        )
    )


def revision(session: Session, entry: Entry, number: int) -> Revision:
    found = session.scalar(
        sa.select(Revision).where(Revision.entry_id == entry.id, Revision.number == number)
    )
    if found is None:
        raise NotFound(f"entry {entry.id} has no revision {number}")
    return found


@dataclass
class Backlink:
    source: Entry
    context: str


# Built once (every entry page runs it): sources of links to any of an entry's keys.
BACKLINKS = (
    sa.select(Entry, Link.context)
    .options(sa.orm.defer(Entry.body_md), sa.orm.defer(Entry.body_html),
             sa.orm.defer(Entry.toc_html))  # a backlink shows a title, not the text
    .join(Link, Link.source_id == Entry.id)
    .where(Link.target_key.in_(sa.bindparam("keys", expanding=True)),
           Entry.id != sa.bindparam("id"))
    .order_by(Entry.date.desc(), Entry.id.desc())
)


def backlinks(session: Session, entry: Entry) -> list[Backlink]:
    rows = session.execute(BACKLINKS, {"keys": sorted(keys_of(entry)), "id": entry.id}).all()
    seen: set[int] = set()
    result = []
    for source, context in rows:
        if source.id not in seen:
            seen.add(source.id)
            result.append(Backlink(source, context))
    return result


def _neighbour_query(direction: str, published_only: bool) -> sa.Select:
    # Row values, not OR-ed comparisons: with bound parameters SQLite only turns the
    # former into an index range, and the OR form scans the whole index (O(N) per page).
    # Only the columns a prev/next link needs: bodies can be large.
    key = sa.tuple_(Entry.date, Entry.id)
    here = sa.tuple_(sa.bindparam("date", type_=sa.Date), sa.bindparam("id"))
    query = sa.select(Entry.id, Entry.kind, Entry.title, Entry.slug, Entry.iso_week,
                      Entry.date)
    if direction == "prev":
        query = query.where(key < here).order_by(Entry.date.desc(), Entry.id.desc())
    else:
        query = query.where(key > here).order_by(Entry.date, Entry.id)
    if published_only:
        query = query.where(Entry.status == "published")
    return query.limit(1)


# Built once: every page view reuses the compiled statements.
NEIGHBOURS = {(d, p): _neighbour_query(d, p) for d in ("prev", "next") for p in (False, True)}


def neighbours(session: Session, entry: Entry, *, include_drafts: bool = True):
    """(previous, next) by date, then id: rows with id, kind, title, slug, iso_week, date."""
    where = {"date": entry.date, "id": entry.id}
    return tuple(session.execute(NEIGHBOURS[(d, not include_drafts)], where).first()
                 for d in ("prev", "next"))


def recent(session: Session, limit: int = 20, kind: str | None = "entry", *,
           include_drafts: bool = True) -> list[Entry]:
    query = (sa.select(Entry).options(sa.orm.defer(Entry.body_md), sa.orm.defer(Entry.body_html),
                                      sa.orm.defer(Entry.toc_html))
             .order_by(Entry.date.desc(), Entry.id.desc()).limit(limit))
    if kind:
        query = query.where(Entry.kind == kind)
    if not include_drafts:
        query = query.where(Entry.status == "published")
    return list(session.scalars(query))


def tag_counts(session: Session, *, include_drafts: bool = True) -> list[tuple[str, int]]:
    """Tags with how many entries carry them; a tag only drafts carry is not shown to a
    reader who may not see drafts."""
    query = (sa.select(EntryTag.tag, sa.func.count()).group_by(EntryTag.tag)
             .order_by(sa.func.count().desc(), EntryTag.tag))
    if not include_drafts:
        query = query.join(Entry, Entry.id == EntryTag.entry_id).where(
            Entry.status == "published")
    return list(session.execute(query))


def tagged(session: Session, tag: str, *, limit: int | None = None, offset: int = 0,
           include_drafts: bool = True) -> tuple[list[Entry], int]:
    """A page of the entries with `tag`, newest first, and how many there are in all."""
    where = [EntryTag.tag == tag]
    if not include_drafts:
        where.append(Entry.status == "published")
    query = (sa.select(Entry).join(EntryTag, EntryTag.entry_id == Entry.id).where(*where)
             .options(sa.orm.defer(Entry.body_md), sa.orm.defer(Entry.body_html),
                      sa.orm.defer(Entry.toc_html))
             .order_by(Entry.date.desc(), Entry.id.desc()).offset(offset))
    if limit is not None:
        query = query.limit(limit)
    total = session.scalar(sa.select(sa.func.count()).select_from(EntryTag)
                           .join(Entry, EntryTag.entry_id == Entry.id).where(*where))
    return list(session.scalars(query)), total


def years(session: Session, *, include_drafts: bool = True) -> list[tuple[str, int]]:
    """ISO years that have entries, newest first, with how many each holds."""
    year = sa.func.substr(Entry.iso_week, 1, 4)
    query = sa.select(year, sa.func.count()).group_by(year).order_by(year.desc())
    if not include_drafts:
        query = query.where(Entry.status == "published")
    return [(y, n) for y, n in session.execute(query)]


def of_year(session: Session, year: str, *, include_drafts: bool = True) -> list[Entry]:
    """One ISO year's entries and letters (titles and dates only), by week."""
    query = (sa.select(Entry)
             .options(sa.orm.load_only(Entry.id, Entry.kind, Entry.date, Entry.iso_week,
                                       Entry.title, Entry.slug, Entry.status))
             .where(Entry.iso_week >= f"{year}-W", Entry.iso_week < f"{year}-X")
             .order_by(Entry.iso_week.desc(), Entry.kind.desc(), Entry.date, Entry.id))
    if not include_drafts:
        query = query.where(Entry.status == "published")
    return list(session.scalars(query))
