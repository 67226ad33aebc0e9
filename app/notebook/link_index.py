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
import re
from dataclasses import dataclass
from urllib.parse import quote

from app.notebook import note_paths
from app.notebook.addresses import entry_url
from app.notebook.entries import DATE_RE, link_key
from app.notebook.isoweeks import WEEK_RE
from app.notebook.mirror import relpath
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
    source: str | None = None  # the file it was imported from (Entry.source_path)
    aliases: tuple[str, ...] = ()  # link keys
    extra: str | None = None  # its file's other front matter (Entry.front_matter)
    export_id: str | None = None  # what an export names it by (mirror.export_id)

    @property
    def path_key(self) -> str:
        return note_paths.path_key(self.source) if self.source else ""

    @property
    def tag_list(self) -> list[str]:
        return self.tags.split()

    def copy(self) -> Known:
        return Known(**self.__dict__)


def keys_of(known: Known) -> set[str]:
    keys = {link_key(known.title), known.date.isoformat(), *known.aliases}
    if known.kind == "week":
        keys.add(known.iso_week.lower())
    if known.source:
        keys.update(note_paths.suffix_keys(known.path_key))
    return keys


class LinkIndex:
    def __init__(self) -> None:
        self.by_title: dict[str, list[Known]] = {}
        self.by_date: dict[str, list[Known]] = {}
        self.weeks: dict[str, Known] = {}
        self.slugs: dict[tuple[dt.date, str], list[Known]] = {}
        self.by_name: dict[str, list[Known]] = {}
        self.by_alias: dict[str, list[Known]] = {}
        self.sources: dict[str, Known] = {}

    def add(self, known: Known) -> None:
        self.by_title.setdefault(link_key(known.title), []).append(known)
        self.by_date.setdefault(known.date.isoformat(), []).append(known)
        if known.source:
            self.sources[known.source] = known
            self.by_name.setdefault(note_paths.name_of(known.path_key), []).append(known)
        for alias in known.aliases:
            self.by_alias.setdefault(alias, []).append(known)
        if known.kind == "week":
            self.weeks[known.iso_week] = known
        else:
            self.slugs.setdefault((known.date, known.slug), []).append(known)

    def remove(self, known: Known) -> None:
        """Forget `known` as it was indexed (call before changing its fields)."""
        tables: list[tuple[dict, object]] = [
            (self.by_title, link_key(known.title)), (self.by_date, known.date.isoformat()),
            (self.slugs, (known.date, known.slug)),
            *((self.by_alias, alias) for alias in known.aliases)]
        if known.source:
            tables.append((self.by_name, note_paths.name_of(known.path_key)))
            if self.sources.get(known.source) is known:
                del self.sources[known.source]
        for table, key in tables:
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
        target = note_paths.page_of(target)
        if not target:
            return None
        week = target.strip().upper()
        if WEEK_RE.match(week):
            return self.weeks.get(week)
        key = link_key(target)
        if DATE_RE.match(key):  # ORDER BY kind DESC, id
            found = self.by_date.get(key)
            return min(found, key=lambda k: (k.kind != "week", k.order)) if found else None
        path = note_paths.target_key(target)
        named = self.by_name.get(note_paths.name_of(path), ())
        order = note_paths.best(path, ((k.path_key, k.order) for k in named))
        if order is not None:
            return next(k for k in named if k.order == order)
        found = self.by_title.get(key) or self.by_alias.get(key)  # ORDER BY date DESC, id DESC
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

    def match(self, kind: str, week: str, source: str, claimed: set[int],
              in_folder: set[str]) -> Known | None:
        """The entry an imported file updates, if any: the one imported from this path
        before; else the entry whose mirror file (mirror.relpath) this is, or the week's
        letter for a letter's file, unless that entry is another file's of this folder.
        Never an entry another file of this import has claimed (`claimed`: ids of Knowns),
        so no two files are ever one entry."""
        found = self.sources.get(source)
        if found is None and kind == "week":
            found = self.weeks.get(week)
            if found is not None and found.source not in (None, source):
                return None  # another folder's letter of that week
        elif found is None:
            found = self._by_relpath(source)
        if found is None or id(found) in claimed:
            return None
        if found.source != source and found.source in in_folder:
            return None
        return found

    def _by_relpath(self, source: str) -> Known | None:
        named = MIRROR_PATH_RE.match(source)
        if not named:
            return None
        try:
            date = dt.date.fromisoformat(named[1])
        except ValueError:
            return None
        for known in self.slugs.get((date, named[2]), ()):
            if str(relpath(known)) == source:  # type: ignore[arg-type]
                return known
        return None


MIRROR_PATH_RE = re.compile(r"^\d{4}/(\d{4}-\d{2}-\d{2})-(.+)\.md$")
