"""Step 2 of a bulk import (app/notebook/bulk_import.py): what each file does. In file
order and in memory, it decides as a save per file would (transfer.import_folder_slowly):
which entry a file creates or updates (the week's letter, or the entry that day named
like the file or its title), its slug, its revision, that it is unchanged, or why it is
refused, with the same checks as entries.create/update.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import sqlalchemy as sa

from app.errors import Refusal
from app.models import Entry
from app.notebook import entries
from app.notebook.isoweeks import iso_week
from app.notebook.link_index import NEW, Known, LinkIndex, keys_of


@dataclass
class ImportReport:
    created: int = 0
    updated: int = 0
    unchanged: int = 0
    errors: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def per_second(self) -> float:
        done = self.created + self.updated + self.unchanged
        return done / self.seconds if self.seconds else 0.0


@dataclass
class Op:
    path: Path
    entity: Known  # the entry, as planned to the end (identity of the entry)
    after: Known  # its state after this file
    before: Known | None  # before this file (None: the file creates it)
    body: str

    @property
    def changed_keys(self) -> set[str]:
        """The link keys whose linkers render again (entries.changed_keys)."""
        new = keys_of(self.after)
        if self.before is None:
            return new
        old = keys_of(self.before)
        return new | old if self.after.status != self.before.status else new ^ old


def existing(db) -> list[Known]:
    with db.read() as session:
        rows = session.execute(sa.select(
            Entry.id, Entry.kind, Entry.date, Entry.iso_week, Entry.title, Entry.slug,
            Entry.status, Entry.revision, Entry.tags, Entry.body_md, Entry.publish))
        return [Known(r.id, r.id, r.kind, r.date, r.iso_week, r.title, r.slug, r.status,
                      r.revision, r.tags, hash(r.body_md), r.publish) for r in rows]


def plan(parsed: Iterable, existing: list[Known], author: str,
          report: ImportReport) -> tuple[list[Op], list[Known]]:
    """What each file does, in order, as transfer's save per file would decide it."""
    index = LinkIndex()
    for known in existing:
        index.add(known)
    ops: list[Op] = []
    untouched: list[Known] = []
    for n, p in enumerate(parsed):
        if isinstance(p, str):  # a file that could not be read
            report.errors.append(p)
            continue
        week = iso_week(p.date)
        slugs = {entries.slugify(p.slug or p.title), entries.slugify(p.title)}
        found = index.match(p.kind, p.date, week, slugs)
        try:
            if found is None:
                fields = entries.Fields(entries.parse_date(p.date), entries.check_title(p.title),
                                        entries.check_body(p.body), entries.parse_tags(p.tags),
                                        entries.check_status(p.status),
                                        entries.check_publish(p.publish))
            else:
                date = p.date if p.kind == "entry" else found.date
                fields = entries.Fields(entries.parse_date(date), entries.check_title(p.title),
                                        entries.check_body(p.body), entries.parse_tags(p.tags),
                                        entries.check_status(p.status),
                                        entries.check_publish(p.publish))
        except Refusal as exc:
            report.errors.append(f"{p.path}: {exc}")
            continue
        if found is None:
            known = Known(None, NEW + n, p.kind, fields.date, week, fields.title, "",
                          fields.status)
            before = None
            report.created += 1
        else:
            same = (fields.date == found.date and fields.title == found.title
                    and hash(fields.body) == found.body_hash
                    and fields.tags == found.tag_list and fields.status == found.status
                    and fields.publish == found.publish)
            if same:
                report.unchanged += 1
                untouched.append(found)
                continue
            known, before = found, found.copy()
            index.remove(known)
            report.updated += 1
        known.date, known.iso_week, known.title = fields.date, iso_week(fields.date), fields.title
        known.tags, known.status = " ".join(fields.tags), fields.status
        known.publish = fields.publish
        known.body_hash, known.revision = hash(fields.body), known.revision + 1
        known.slug = (index.unique_slug(known, entries.slugify(fields.title))
                      if known.kind == "entry" else known.iso_week.lower())
        index.add(known)
        ops.append(Op(p.path, known, known.copy(), before, fields.body))
    return ops, untouched
