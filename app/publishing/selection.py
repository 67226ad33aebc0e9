"""Which entries are public, and where each public thing lives on the site.

An entry is public when it is saved (not a draft), has `publish: true`, and carries no
private tag: the tag `private`, or one the owner lists in COMMONPLACE_PRIVATE_TAGS, or a
tag under one of them (`work` covers `work/clients`). A private tag overrides `publish`,
so a tag the owner keeps to themselves never names a public page.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import sqlalchemy as sa
from sqlalchemy.orm import Session

from app.models import Entry, EntryTag

ALWAYS_PRIVATE = ("private",)


def is_private_tag(tag: str, private_tags: tuple[str, ...]) -> bool:
    return any(tag == p or tag.startswith(p + "/") for p in (*ALWAYS_PRIVATE, *private_tags))


def entry_path(entry: Entry) -> str:
    """An entry's page, relative to the site's root."""
    if entry.kind == "week":
        return f"weeks/{entry.iso_week}.html"
    return f"entries/{entry.id}-{entry.slug}.html"


def tag_path(tag: str) -> str:
    # A nested tag's "/" would make a deeper folder; "." never occurs in a tag.
    return f"tags/{tag.replace('/', '.')}.html"


@dataclass
class Public:
    """The public entries, newest first, with their tags (private ones never among them)."""

    entries: list[Entry]
    tags: dict[int, list[str]]
    by_id: dict[int, Entry] = field(init=False)
    by_week: dict[str, Entry] = field(init=False)
    by_tag: dict[str, list[Entry]] = field(init=False)

    def __post_init__(self) -> None:
        self.by_id = {e.id: e for e in self.entries}
        self.by_week = {e.iso_week: e for e in self.entries if e.kind == "week"}
        self.by_tag = defaultdict(list)
        for entry in self.entries:
            for tag in self.tags[entry.id]:
                self.by_tag[tag].append(entry)


def public(session: Session, private_tags: tuple[str, ...] = ()) -> Public:
    candidates = list(session.scalars(
        sa.select(Entry).where(Entry.status == "published", Entry.publish.is_(True))
        .order_by(Entry.date.desc(), Entry.id.desc())))
    tags: dict[int, list[str]] = defaultdict(list)
    for entry_id, tag in session.execute(
            sa.select(EntryTag.entry_id, EntryTag.tag)
            .where(EntryTag.entry_id.in_([e.id for e in candidates]))
            .order_by(EntryTag.entry_id, EntryTag.tag)):
        tags[entry_id].append(tag)
    kept = [e for e in candidates
            if not any(is_private_tag(t, private_tags) for t in tags[e.id])]
    return Public(kept, {e.id: tags[e.id] for e in kept})
