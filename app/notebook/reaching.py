"""Which [[links]] reach an entry: the link keys entries.resolve sends to it, which its
backlinks are read by (browse.backlinks). Statements built and compiled once (Prepared):
every entry page runs them."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.orm import Session

from app.db import Prepared
from app.models import Entry, EntryAlias
from app.notebook import note_paths
from app.notebook.entries import DATE_RE, link_key
from app.notebook.entry_rows import EntryRow
from app.notebook.isoweeks import WEEK_RE

_NEWEST = (Entry.date.desc(), Entry.id.desc())


# Which links reach an entry: those entries.resolve sends to it. A [[2024-03-05]] opens
# the day's letter, else its first entry; a [[Title]] the newest entry of that title; a
# [[2024-W13]] the week's letter. Only that entry lists such a link among its backlinks.
# (Every entry of the day listed a date's links: most of an average entry page's lines,
# and the lines that grew with the notebook; docs/PERFORMANCE.md, *Browsing*.)
# An imported note is reached first by its file's path (note_paths: [[Note]], [[Folder/
# Note]], the shortest path among files of one name), then by title, then by its aliases.
# One statement, an index seek each: ix_entry_kind_date and ix_entry_date for the day,
# ix_entry_title_key for the title, ix_entry_name_key for a file of that name, the entry's
# own file and aliases; more only for an entry imported from a file or with aliases.
_DAY, _ID = sa.bindparam("date", type_=sa.Date), sa.bindparam("id")
_ME = sa.orm.aliased(Entry)


def _any(*where) -> sa.Exists:  # SELECT 1, or SQLite reads the row of an index's match
    return sa.select(sa.literal_column("1")).where(*where).exists()


def _passed_over_query(kind: str) -> sa.Select:
    letter = (Entry.kind == "week", Entry.date == _DAY)  # letters come first
    day = (_any(*letter, Entry.id < _ID) if kind == "week"
           else sa.or_(_any(*letter), _any(Entry.date == _DAY, Entry.id < _ID)))
    newer = _any(Entry.title_key == sa.bindparam("title"),
                 sa.tuple_(Entry.date, Entry.id) > sa.tuple_(_DAY, _ID))
    named = _any(Entry.name_key == sa.bindparam("title"))
    source = sa.select(_ME.source_path).where(_ME.id == _ID).scalar_subquery()
    aliased = _any(EntryAlias.entry_id == _ID)
    return sa.select(day.label("day"), newer.label("title"), named.label("named"),
                     source.label("source"), aliased.label("aliased"))


PASSED_OVER = {kind: Prepared(_passed_over_query(kind)) for kind in ("entry", "week")}


_ALIASES = Prepared(sa.select(EntryAlias.key).where(EntryAlias.entry_id == sa.bindparam("id")))
_NAMED = Prepared(sa.select(Entry.id, Entry.source_path)
                  .where(Entry.name_key == sa.bindparam("name")))
_TITLED = Prepared(sa.select(_any(Entry.title_key == sa.bindparam("key")).label("found")))
_ALIAS_NEWEST = Prepared(sa.select(Entry.id).join(EntryAlias, EntryAlias.entry_id == Entry.id)
                         .where(EntryAlias.key == sa.bindparam("key"))
                         .order_by(*_NEWEST).limit(1))


def _by_path(session: Session, key: str) -> int | None:
    """The id of the entry whose file [[key]] reaches (entries.resolve's rule)."""
    named = _NAMED.run(session, {"name": note_paths.name_of(key)})
    return note_paths.best(key, ((note_paths.path_key(p), i) for i, p in named))


def _a_day_or_week(key: str) -> bool:  # such a key is reached as a date or a week
    return bool(DATE_RE.match(key) or WEEK_RE.match(key.upper()))


def reached_by(session: Session, entry: Entry | EntryRow) -> list[str]:
    """The link keys that lead to `entry`: what Link.target_key holds for them."""
    title = link_key(entry.title)
    day, newer, named, source, aliased = PASSED_OVER[entry.kind].run(
        session, {"date": entry.date, "id": entry.id, "title": title})[0]
    keys = [entry.iso_week.lower()] if entry.kind == "week" else []
    if source:
        keys += [key for key in note_paths.suffix_keys(note_paths.path_key(source))
                 if not _a_day_or_week(key) and _by_path(session, key) == entry.id]
    if "/" in title:  # (`named` asked for a file named the whole title)
        named = _by_path(session, title) is not None
    if not (newer or named or _a_day_or_week(title)):
        keys.append(title)  # (a title that reads as a date or week is never reached as one)
    for alias in [r.key for r in _ALIASES.run(session, {"id": entry.id})] if aliased else ():
        if (alias not in keys and not _a_day_or_week(alias)
                and _by_path(session, alias) is None
                and not _TITLED.run(session, {"key": alias})[0][0]
                and _ALIAS_NEWEST.run(session, {"key": alias})[0][0] == entry.id):
            keys.append(alias)
    if not day:
        keys.append(entry.date.isoformat())
    return sorted(set(keys))
