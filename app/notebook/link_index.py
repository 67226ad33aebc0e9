"""The notebook held in memory for a bulk import: which entry a [[wiki link]] reaches and
which slugs are taken, answered from dictionaries instead of a query per link.

It answers exactly as app/notebook/entries.py `resolve` and `_unique_slug` answer from the
database (same keys, same order among several candidates), so HTML rendered against it
is the HTML a save would store. A bulk import keeps two: one for planning (every file in
order, as a save per file would see the notebook) and one for rendering (only what has
been committed so far, so each batch is resolved against the notebook as it stands).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from urllib.parse import quote

from app.notebook.addresses import entry_url
from app.notebook.entries import DATE_RE, link_key
from app.notebook.isoweeks import WEEK_RE
from app.notebook.render import Resolved

NEW = 1 << 62  # where planned entries sort among ids: after every existing one, in order


@dataclass
class Known:
    """An entry as links and slugs see it. `id` is None until its row is inserted; `order`
    is its id, or NEW + its place in the import for one not inserted yet."""

    id: int | None
    order: int
    kind: str
    date: dt.date
    iso_week: str
    title: str
    slug: str
    status: str
    revision: int = 0
    tags: str = ""
    body_hash: int = 0
    publish: bool = False

    @property
    def tag_list(self) -> list[str]:
        return self.tags.split()

    def copy(self) -> Known:
        return Known(**self.__dict__)


def keys_of(known: Known) -> set[str]:
    keys = {link_key(known.title), known.date.isoformat()}
    if known.kind == "week":
        keys.add(known.iso_week.lower())
    return keys


class LinkIndex:
    def __init__(self) -> None:
        self.by_title: dict[str, list[Known]] = {}
        self.by_date: dict[str, list[Known]] = {}
        self.weeks: dict[str, Known] = {}
        self.slugs: dict[tuple[dt.date, str], list[Known]] = {}

    def add(self, known: Known) -> None:
        self.by_title.setdefault(link_key(known.title), []).append(known)
        self.by_date.setdefault(known.date.isoformat(), []).append(known)
        if known.kind == "week":
            self.weeks[known.iso_week] = known
        else:
            self.slugs.setdefault((known.date, known.slug), []).append(known)

    def remove(self, known: Known) -> None:
        """Forget `known` as it was indexed (call before changing its fields)."""
        for table, key in ((self.by_title, link_key(known.title)),
                           (self.by_date, known.date.isoformat()),
                           (self.slugs, (known.date, known.slug))):
            found = table.get(key, [])
            for i, other in enumerate(found):
                if other is known:
                    del found[i]
                    break
            if not found:
                table.pop(key, None)
        if known.kind == "week" and self.weeks.get(known.iso_week) is known:
            del self.weeks[known.iso_week]

    # -- entries.resolve / entries._resolver ----------------------------------------------

    def find(self, target: str) -> Known | None:
        week = target.strip().upper()
        if WEEK_RE.match(week):
            return self.weeks.get(week)
        key = link_key(target)
        if DATE_RE.match(key):  # ORDER BY kind DESC, id
            found = self.by_date.get(key)
            return min(found, key=lambda k: (k.kind != "week", k.order)) if found else None
        found = self.by_title.get(key)  # ORDER BY date DESC, id DESC
        return max(found, key=lambda k: (k.date, k.order)) if found else None

    def resolve(self, target: str) -> Resolved:
        found = self.find(target)
        if found is not None:
            return Resolved(entry_url(found), True, found.status == "draft")  # type: ignore[arg-type]
        if WEEK_RE.match(target.strip().upper()):
            return Resolved(f"/weeks/{target.strip().upper()}", False)
        field = "date" if DATE_RE.match(target.strip()) else "title"
        return Resolved(f"/entries/new?{field}={quote(target.strip())}", False)

    # -- entries._unique_slug -------------------------------------------------------------

    def unique_slug(self, known: Known, base: str) -> str:
        slug, n = base, 1
        while any(other is not known for other in self.slugs.get((known.date, slug), ())):
            n += 1
            slug = f"{base}-{n}"
        return slug

    def match(self, kind: str, date: dt.date, week: str, slugs: set[str]) -> Known | None:
        """The entry an imported file updates (transfer's rule): the week's letter, or the
        first entry that day whose slug is the file's name or its title."""
        if kind == "week":
            return self.weeks.get(week)
        found = [k for slug in slugs for k in self.slugs.get((date, slug), ())]
        return min(found, key=lambda k: k.order) if found else None
