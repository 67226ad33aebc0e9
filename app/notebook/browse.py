"""Browsing the notebook: an entry's history, what links to it, its neighbours by date,
recent entries, tags and years. Read-only queries; the pages and the API call these.
Queries a page runs on every view are built and compiled once (app/db.py's Prepared)."""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.orm import Session
from sqlalchemy.pool import ConnectionPoolEntry

from app.db import Prepared, sqlite_connection
from app.errors import NotFound
from app.models import Entry, EntryTag, Link, Revision
from app.notebook.entry_rows import LISTED, EntryRow, rows
from app.notebook.reaching import PASSED_OVER, reached_by

__all__ = ["PASSED_OVER", "reached_by"]  # (which links reach an entry: reaching.py)


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
    source: EntryRow
    context: str


_LINKED_TO = (Link.target_key.in_(sa.bindparam("keys", expanding=True)),
              Link.source_id != sa.bindparam("id"))  # any of an entry's keys, not itself
_NEWEST = (Entry.date.desc(), Entry.id.desc())  # every list of entries, newest first
_NEWEST_FIRST = (*_NEWEST, Link.id)  # and a source's links in their order


def _newest_query(published_only: bool) -> sa.Select:
    # Only what a line shows, and its address: the listed columns' timestamps were two
    # datetime parses a line, on every line of every listing.
    query = (sa.select(Entry.id, Entry.kind, Entry.iso_week, Entry.slug, Entry.title,
                       Entry.date, Link.context)
             .join(Link, Link.source_id == Entry.id).where(*_LINKED_TO)
             .order_by(*_NEWEST_FIRST).limit(sa.bindparam("limit")))
    return query.where(Entry.status == "published") if published_only else query


def _count_query(published_only: bool) -> sa.Select:
    query = (sa.select(sa.func.count(sa.distinct(Link.source_id)).label("sources"))
             .join(Entry, Link.source_id == Entry.id).where(*_LINKED_TO))
    return query.where(Entry.status == "published") if published_only else query


def _sources_query(published_only: bool) -> sa.Select:
    """A page of the sources, each once, as a row (app/notebook/entry_rows.py) with the
    context of its first link here. Paged in SQL, ordered by what begins an entry's row
    (its date): only the page's rows are read to their end, where the listed columns
    after the bodies cost a read of overflow pages each (docs/PERFORMANCE.md, *Browsing*)."""
    first = (sa.select(Link.source_id, sa.func.min(Link.id).label("link_id"))
             .where(*_LINKED_TO).group_by(Link.source_id).cte("first"))
    page = (sa.select(first.c.source_id, first.c.link_id, Entry.date)
            .join(Entry, Entry.id == first.c.source_id)
            .order_by(*_NEWEST)
            .limit(sa.bindparam("limit")).offset(sa.bindparam("offset")))
    if published_only:
        page = page.where(Entry.status == "published")
    page = page.cte("page")
    return (sa.select(*LISTED, Link.context)
            .join(page, page.c.source_id == Entry.id).join(Link, Link.id == page.c.link_id)
            .order_by(page.c.date.desc(), Entry.id.desc()))


# Built once, keyed by published_only: every entry page and letter runs the newest and
# the count; the API pages through the sources.
BACKLINK_PAGE = {p: Prepared(_sources_query(p)) for p in (False, True)}
NEWEST_BACKLINKS = {p: Prepared(_newest_query(p)) for p in (False, True)}
BACKLINK_COUNT = {p: Prepared(_count_query(p)) for p in (False, True)}


def _first_per_source(found: list) -> list:
    """One row per source (the first: its first link's context)."""
    seen: set[int] = set()
    first = []
    for row in found:
        if row[0] not in seen:
            seen.add(row[0])
            first.append(row)
    return first


def backlinks(session: Session, entry: Entry | EntryRow, *, include_drafts: bool,
              limit: int, offset: int = 0) -> tuple[list[Backlink], int]:
    """The entries linking to `entry`, newest first, each once with its first link's
    context: `limit` of them from `offset`, and how many there are in all."""
    params = {"keys": reached_by(session, entry), "id": entry.id}
    found = BACKLINK_PAGE[not include_drafts].run(session, {**params, "limit": limit,
                                                           "offset": offset})
    total = BACKLINK_COUNT[not include_drafts].run(session, params)[0][0]
    return [Backlink(EntryRow(*source), context) for *source, context in found], total


def newest_backlinks(session: Session, entry: Entry | EntryRow, shown: int, *,
                     include_drafts: bool) -> tuple[list, int]:
    """At most the newest `shown` entries linking to `entry`, as rows of id, kind,
    iso_week, slug, title, date and context (their first link's), and how many link to
    it in all. A hub (a page every weekly letter of ten years links to) has hundreds: its
    page shows as many lines as any other's and counts the rest in one index scan."""
    params = {"keys": reached_by(session, entry), "id": entry.id, "limit": shown + 1}
    found = NEWEST_BACKLINKS[not include_drafts].run(session, params)
    sources = _first_per_source(found)
    if len(found) <= shown:  # every link was read
        return sources, len(sources)
    del params["limit"]
    return sources[:shown], BACKLINK_COUNT[not include_drafts].run(session, params)[0][0]


def _neighbour_query(direction: str, published_only: bool) -> sa.Select:
    # Row values, not OR-ed comparisons: with bound parameters SQLite only turns the
    # former into an index range, and the OR form scans the whole index (O(N) per page).
    # Only the columns a prev/next link needs: bodies can be large.
    key = sa.tuple_(Entry.date, Entry.id)
    here = sa.tuple_(sa.bindparam("date", type_=sa.Date), sa.bindparam("id"))
    query = sa.select(sa.literal(direction).label("side"), Entry.id, Entry.kind, Entry.title,
                      Entry.slug, Entry.iso_week, Entry.date)
    if direction == "prev":
        query = query.where(key < here).order_by(*_NEWEST)
    else:
        query = query.where(key > here).order_by(Entry.date, Entry.id)
    if published_only:
        query = query.where(Entry.status == "published")
    return query.limit(1)


# Built once, both sides in one statement: every entry page runs it (each side's own
# ORDER BY and LIMIT stay inside its subquery, so each is still one index seek).
NEIGHBOURS = {p: Prepared(sa.union_all(*(sa.select(_neighbour_query(d, p).subquery())
                                         for d in ("prev", "next")))) for p in (False, True)}


def neighbours(session: Session, entry: Entry | EntryRow, *, include_drafts: bool = True):
    """(previous, next) by date, then id: rows with id, kind, title, slug, iso_week, date
    (and `side`), or None."""
    found = NEIGHBOURS[not include_drafts].run(session, {"date": entry.date, "id": entry.id})
    sides = {row.side: row for row in found}
    return sides.get("prev"), sides.get("next")


def _recent_query(kind: str | None, published_only: bool) -> sa.Select:
    query = (sa.select(*LISTED).order_by(*_NEWEST)
             .limit(sa.bindparam("limit")))
    if kind:
        query = query.where(Entry.kind == kind)
    if published_only:
        query = query.where(Entry.status == "published")
    return query


# Built once, as the home page asks on every view (building a select and its cache key
# cost more than SQLite's answer through ix_entry_kind_date: docs/PERFORMANCE.md).
RECENT = {(k, p): Prepared(_recent_query(k, p))
          for k in ("entry", "week", None) for p in (False, True)}


def recent(session: Session, limit: int = 20, kind: str | None = "entry", *,
           include_drafts: bool = True) -> list[EntryRow]:
    return rows(session, RECENT[(kind, not include_drafts)], {"limit": limit})


# -- counts over the whole notebook ---------------------------------------------------------
# The site map's years and tags, and a tag page's total, are counts over every entry: their
# cost grows with the notebook. They change only when the notebook does, so the process
# keeps the last answer with the notebook's version it was read at, and recounts only
# after a change. The version is notebook_version.n (migration 0009), which triggers move
# with every row written to `entry`, from any connection or process; writes to the journal
# (a runner's long poll, a run's progress, a token's last use) leave it alone. It is the
# database's, not a connection's, so one answer serves every connection of the pool: a
# connection the pool opens under load does not count the notebook again. Other databases
# count every time.

VERSION = "SELECT n FROM notebook_version"
_COUNTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # pool -> {key: (n, list)}


def version(session: Session | ConnectionPoolEntry) -> int | None:
    """The notebook's version in the session's (or get_reader's) snapshot (None: not
    SQLite). Read in the request's own transaction, so it is the version of what the
    request reads next (app/web/pages/kept.py keys the pages it keeps by it too)."""
    dbapi = sqlite_connection(session)
    return None if dbapi is None else dbapi.execute(VERSION).fetchone()[0]


# Published counts are every entry's counts less the drafts': counted directly, the
# status filter read every entry's row (for the years) or looked up each tagged entry (for
# the tags): docs/PERFORMANCE.md, *Browsing*. Every entry's come from covering indexes,
# the drafts' (few) from ix_entry_draft_week; the status is a literal, not a bound
# parameter, or SQLite cannot tell that the partial index applies.
_YEAR = sa.func.substr(Entry.iso_week, 1, 4)
_DRAFT = Entry.status == sa.literal_column("'draft'")
YEARS = sa.select(_YEAR, sa.func.count()).group_by(_YEAR)
DRAFT_YEARS = YEARS.where(_DRAFT)
TAGS = sa.select(EntryTag.tag, sa.func.count()).group_by(EntryTag.tag)
# (IN, not a join: SQLite would walk every tag's rows to keep the GROUP BY's order)
DRAFT_TAGS = TAGS.where(EntryTag.entry_id.in_(sa.select(Entry.id).where(_DRAFT)))


def _less(counts: dict[str, int], drafts: dict[str, int]) -> dict[str, int]:
    return {key: n - drafts.get(key, 0) for key, n in counts.items()
            if n > drafts.get(key, 0)}


def _counted(session: Session, key: tuple, count: Callable[[], list]) -> list:
    found = version(session)
    if found is None:
        return count()
    cache = _COUNTS.setdefault(session.connection().engine.pool, {})
    kept = cache.get(key)
    if kept is None or kept[0] != found:
        kept = cache[key] = (found, count())
    return list(kept[1])


def tag_counts(session: Session, *, include_drafts: bool = True) -> list[tuple[str, int]]:
    """Tags with how many entries carry them, most first; a tag only drafts carry is not
    shown to a reader who may not see drafts."""
    def count() -> list[tuple[str, int]]:
        counts = dict(session.execute(TAGS).all())
        if not include_drafts:
            counts = _less(counts, dict(session.execute(DRAFT_TAGS).all()))
        return sorted(counts.items(), key=lambda tag_n: (-tag_n[1], tag_n[0]))
    return _counted(session, ("tags", include_drafts), count)


def tag_count(session: Session, tag: str, *, include_drafts: bool = True) -> int:
    counts = _counted(session, ("tag index", include_drafts),
                      lambda: [dict(tag_counts(session, include_drafts=include_drafts))])
    return counts[0].get(tag, 0)


MAX_ID = Prepared(sa.select(sa.func.max(Entry.id).label("id")))


def _tagged_query(walk: bool, published_only: bool) -> sa.Select:
    query = (sa.select(*LISTED).order_by(*_NEWEST)
             .limit(sa.bindparam("limit")).offset(sa.bindparam("offset")))
    if walk:  # newest first through ix_entry_date, each entry checked for the tag
        query = query.where(sa.select(EntryTag.entry_id).where(
            EntryTag.entry_id == Entry.id, EntryTag.tag == sa.bindparam("tag")).exists())
    else:  # the tag's rows through ix_entry_tag_tag, then sorted
        query = query.join(EntryTag, EntryTag.entry_id == Entry.id).where(
            EntryTag.tag == sa.bindparam("tag"))
    if published_only:
        query = query.where(Entry.status == "published")
    return query


TAGGED = {(w, p): Prepared(_tagged_query(w, p)) for w in (False, True) for p in (False, True)}
# A tagged row found through ix_entry_tag_tag and sorted costs what ~10 rows walked do
# (docs/PERFORMANCE.md, *Browsing*); counted as equal, the tags of middling size took the
# sorted plan at several times the walk's cost.
SORTED_ROW = 10


def walks(session: Session, counts: list[int], wanted: int) -> bool:
    """Whether the newest `wanted` entries carrying tags on `counts` entries each are found
    cheaper by walking the entries newest first (~wanted x entries / those carrying all of
    them, the tags taken as independent) than by sorting the rarest tag's own rows."""
    size = MAX_ID.run(session)[0].id or 0  # rowid: an O(1) estimate
    every = size * math.prod(count / size for count in counts) if size else 0
    return every > 0 and wanted * size < SORTED_ROW * min(counts) * every


def tagged(session: Session, tag: str, *, limit: int | None = None, offset: int = 0,
           include_drafts: bool = True) -> tuple[list[EntryRow], int]:
    """A page of the entries with `tag`, newest first, and how many there are in all.

    Two plans, chosen by how common the tag is: a rare tag's rows are found through
    ix_entry_tag_tag and sorted (cost: the tag's entries x SORTED_ROW); a common tag's page
    is found by walking entries newest first (ix_entry_date), checking each for the tag,
    until the page is full (cost: about the page's end x entries / tagged). Each is used
    where it is the cheaper, so no tag page reads the whole notebook."""
    total = tag_count(session, tag, include_drafts=include_drafts)
    if not total:
        return [], 0
    limit = total if limit is None else limit
    walk = walks(session, [total], offset + limit)
    return rows(session, TAGGED[(walk, not include_drafts)],
                {"tag": tag, "limit": limit, "offset": offset}), total


def years(session: Session, *, include_drafts: bool = True) -> list[tuple[str, int]]:
    """ISO years that have entries, newest first, with how many each holds."""
    def count() -> list[tuple[str, int]]:
        counts = dict(session.execute(YEARS).all())
        if not include_drafts:
            counts = _less(counts, dict(session.execute(DRAFT_YEARS).all()))
        return sorted(counts.items(), reverse=True)
    return _counted(session, ("years", include_drafts), count)


def week_counts(session: Session, year: str, *, include_drafts: bool = True) -> dict[str, int]:
    """One ISO year's weeks that hold ordinary entries, with how many each holds."""
    def count() -> list[tuple[str, int]]:
        # kind is counted, not filtered: `kind = 'entry'` in the WHERE makes SQLite walk
        # ix_entry_kind_date (every entry) instead of the year's range of ix_entry_iso_week.
        written = sa.func.sum(sa.case((Entry.kind == "entry", 1), else_=0))
        query = (sa.select(Entry.iso_week, written)
                 .where(Entry.iso_week >= f"{year}-W", Entry.iso_week < f"{year}-X")
                 .group_by(Entry.iso_week).having(written > 0))
        if not include_drafts:
            query = query.where(Entry.status == "published")
        return [(w, n) for w, n in session.execute(query)]
    return dict(_counted(session, ("weeks", year, include_drafts), count))


def _year_query(letters_only: bool, published_only: bool) -> sa.Select:
    query = (sa.select(*LISTED)
             .where(Entry.iso_week >= sa.bindparam("first"), Entry.iso_week < sa.bindparam("end"))
             .order_by(Entry.iso_week.desc(), Entry.kind.desc(), Entry.date, Entry.id))
    if letters_only:  # through ix_entry_kind_date: one row per week the notebook has lived
        query = query.where(Entry.kind == "week")
    if published_only:
        query = query.where(Entry.status == "published")
    return query


OF_YEAR = {(w, p): Prepared(_year_query(w, p)) for w in (False, True) for p in (False, True)}


def of_year(session: Session, year: str, *, include_drafts: bool = True,
            letters_only: bool = False) -> list[EntryRow]:
    """One ISO year's entries and letters, by week."""
    return rows(session, OF_YEAR[(letters_only, not include_drafts)],
                {"first": f"{year}-W", "end": f"{year}-X"})
