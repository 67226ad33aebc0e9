"""Where a [[wiki link]] goes, asked of the database: the entry it reaches, the keys an
entry answers to (for re-rendering the entries that link to it), and the resolver a
render places links with. app/notebook/link_index.py answers the same from memory."""

from __future__ import annotations

import datetime as dt
from urllib.parse import quote

import sqlalchemy as sa
from sqlalchemy.orm import Session

from app.models import Entry, EntryAlias, link_key
from app.notebook import note_paths
from app.notebook.addresses import entry_url
from app.notebook.field_rules import DATE_RE
from app.notebook.isoweeks import WEEK_RE, iso_week
from app.notebook.render import Resolved


def target_key(target: str) -> str:
    """What a link row stores of a link's target (Link.target_key): its page's link key."""
    return link_key(note_paths.page_of(target))[:200]


def keys_of(entry: Entry, aliases: list[str] | tuple[str, ...] = ()) -> set[str]:
    """The link keys an entry answers to: its title, its week if a letter, its date, its
    file's path (every way of spelling it) and its aliases."""
    source = getattr(entry, "source_path", None)  # (an EntryRow has none: not imported)
    return keys_for(entry.kind, entry.title, entry.date, source, aliases)


def keys_for(kind: str, title: str, date: dt.date, source_path: str | None,
             aliases: list[str] | tuple[str, ...] = ()) -> set[str]:
    """keys_of for an entry as a save will leave it (saving.py: before it is written)."""
    keys = {link_key(title), date.isoformat(), *aliases}
    if kind == "week":
        keys.add(iso_week(date).lower())
    if source_path:
        keys.update(note_paths.suffix_keys(note_paths.path_key(source_path)))
    return keys


def alias_keys(session: Session, entry_id: int | None) -> list[str]:
    if not entry_id:
        return []
    return list(session.scalars(sa.select(EntryAlias.key).where(EntryAlias.entry_id == entry_id)
                                .order_by(EntryAlias.key)))


def by_path(session: Session, key: str) -> Entry | None:
    """The entry whose imported file [[key]] reaches, as Obsidian picks it (note_paths)."""
    named = session.execute(sa.select(Entry.id, Entry.source_path).where(
        Entry.name_key == note_paths.name_of(key))).all()
    found = note_paths.best(key, ((note_paths.path_key(p), i) for i, p in named))
    return session.get(Entry, found) if found is not None else None


def resolve(session: Session, target: str) -> Entry | None:
    """The entry a [[target]] reaches: a week's letter; a date's letter, else its first
    entry; an imported file by its path (note_paths); the newest entry of that title;
    the newest with that alias."""
    target = note_paths.page_of(target)
    if not target:
        return None
    key = link_key(target)
    if WEEK_RE.match(target.strip().upper()):
        return session.scalar(
            sa.select(Entry).where(Entry.kind == "week", Entry.iso_week == target.strip().upper())
        )
    if DATE_RE.match(key):
        return session.scalar(
            sa.select(Entry).where(Entry.date == key).order_by(Entry.kind.desc(), Entry.id)
        )
    found = by_path(session, note_paths.target_key(target))
    if found is not None:
        return found
    newest = (Entry.date.desc(), Entry.id.desc())  # the same day: the later entry
    return session.scalar(sa.select(Entry).where(Entry.title_key == key)
                          .order_by(*newest).limit(1)) or session.scalar(
        sa.select(Entry).join(EntryAlias, EntryAlias.entry_id == Entry.id)
        .where(EntryAlias.key == key).order_by(*newest).limit(1))


def placed(target: str, found) -> Resolved:
    """Where a link to `target` goes, given the entry it resolves to (or None): the one
    rule of the resolver here and of saving.resolve_many, which finds many at once."""
    if found is not None:
        return Resolved(entry_url(found), True, found.status == "draft")
    if WEEK_RE.match(target.strip().upper()):
        return Resolved(f"/weeks/{target.strip().upper()}", False)
    field = "date" if DATE_RE.match(target.strip()) else "title"
    return Resolved(f"/entries/new?{field}={quote(target.strip())}", False)


def resolver(session: Session):
    return lambda target: placed(target, resolve(session, target))
