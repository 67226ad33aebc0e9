"""Step 2 of a bulk import (app/notebook/bulk_import.py): what each file does. In file
order and in memory, it decides as a save per file would (transfer.import_folder_slowly):
which entry a file creates or updates (link_index.LinkIndex.match: one entry per file,
found again by its path), its slug, its revision, that it is unchanged, or why it cannot
be imported, with the same checks as entries.create/update.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import sqlalchemy as sa

from app.errors import Refusal
from app.models import Entry, EntryAlias, link_key
from app.notebook import entries
from app.notebook.field_rules import TITLE_UNWANTED
from app.notebook.isoweeks import iso_week
from app.notebook.link_index import NEW, Known, LinkIndex, keys_of
from app.notebook.mirror import export_id


@dataclass
class ImportReport:
    created: int = 0
    updated: int = 0
    unchanged: int = 0
    errors: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # imported, but not all as written
    attachments: dict[str, int] = field(default_factory=dict)  # added, updated, unchanged
    plan: list[str] = field(default_factory=list)  # a dry run's: what each file would do
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
        aliases: dict[int, list[str]] = {}
        for entry_id, key in session.execute(sa.select(EntryAlias.entry_id, EntryAlias.key)
                                             .order_by(EntryAlias.key)):
            aliases.setdefault(entry_id, []).append(key)
        rows = session.execute(sa.select(
            Entry.id, Entry.kind, Entry.date, Entry.iso_week, Entry.title, Entry.slug,
            Entry.status, Entry.revision, Entry.tags, Entry.body_md, Entry.publish,
            Entry.source_path, Entry.front_matter, Entry.created_at))
        return [Known(r.id, r.id, r.kind, r.date, r.iso_week, r.title, r.slug, r.status,
                      r.revision, r.tags, hash(r.body_md), r.publish, r.source_path,
                      tuple(aliases.get(r.id, ())), r.front_matter,
                      export_id(r.id, r.created_at)) for r in rows]


def import_tags(raw: list[str]) -> tuple[list[str], list[str]]:
    """Front matter's tags as the notebook keeps them, and those it cannot (a tag starts
    with a letter: Obsidian's #2024 is not one here), which the import names."""
    tags: list[str] = []
    dropped: list[str] = []
    for value in raw:
        for word in re.split(r"[\s,]+", value):
            tag = word.strip().lstrip("#").lower()
            if not tag or tag in tags:
                continue
            (tags if entries.TAG_RE.match(tag) else dropped).append(tag)
    return tags[:entries.MAX_TAGS], dropped + tags[entries.MAX_TAGS:]


def import_aliases(raw: list[str]) -> tuple[str, ...]:
    return tuple(sorted({link_key(alias)[:200] for alias in raw if link_key(alias)}))


def fields_of(p, date) -> tuple[entries.Fields, list[str]]:
    """A parsed file's fields, checked as a save checks them, and what was left aside."""
    tags, dropped = import_tags(p.tags)
    warnings = list(p.warnings)
    if dropped:
        warnings.append("tags left aside: " + ", ".join(dropped[:10]))
    # A file's name may hold what a title may not (a control character): left out of the
    # title, the file comes in rather than failing.
    title = TITLE_UNWANTED.sub("", p.title)
    if title != p.title:
        warnings.append("control characters left out of the title")
    return entries.Fields(entries.parse_date(date), entries.check_title(title),
                          entries.check_body(p.body), tags,
                          entries.check_status(p.status),
                          entries.check_publish(p.publish)), warnings


def plan(parsed: Iterable, existing: list[Known], author: str, report: ImportReport,
         in_folder: set[str] = frozenset()) -> tuple[list[Op], list[Known]]:  # type: ignore[assignment]
    """What each file does, in order, as transfer's save per file would decide it.
    `in_folder`: the paths of every file of this import (inside its folder)."""
    index = LinkIndex()
    for known in existing:
        index.add(known)
    exported = {known.export_id: known for known in existing if known.export_id}
    ops: list[Op] = []
    untouched: list[Known] = []
    claimed: set[int] = set()
    for n, p in enumerate(parsed):
        if isinstance(p, str):  # a file that could not be read
            report.errors.append(p)
            continue
        week = iso_week(p.date)
        found = index.match(p.kind, week, p.source, claimed, in_folder)
        if found is None and p.export_id:  # this notebook's export: the entry it came from
            found = exported.get(p.export_id)
            if found is not None and (id(found) in claimed or found.source in in_folder):
                found = None  # taken, or its own file is in this folder too
        kind = p.kind
        if found is None and kind == "week" and week in index.weeks:
            kind = "entry"  # that week's letter is another file's
            p.warnings.append(f"{week} has a letter already: imported as an entry")
        try:
            # a letter's date stays in its week (entries.update's rule)
            fields, warnings = fields_of(p, p.date if found is None or found.kind == "entry"
                                         else found.date)
        except Refusal as exc:
            report.errors.append(f"{p.path}: {exc}")
            continue
        report.warnings += [f"{p.path}: {warning}" for warning in warnings]
        aliases = import_aliases(p.aliases)
        if found is None:
            known = Known(None, NEW + n, kind, fields.date, week, fields.title, "",
                          fields.status, source=p.source, aliases=aliases,
                          extra=p.front_matter)
            before = None
            report.created += 1
        else:
            claimed.add(id(found))
            same = (fields.date == found.date and fields.title == found.title
                    and hash(fields.body) == found.body_hash and aliases == found.aliases
                    and fields.tags == found.tag_list and fields.status == found.status
                    and fields.publish == found.publish and p.front_matter == found.extra)
            if same:
                report.unchanged += 1
                untouched.append(found)
                continue
            known, before = found, found.copy()
            index.remove(known)
            report.updated += 1
        claimed.add(id(known))
        known.date, known.iso_week, known.title = fields.date, iso_week(fields.date), fields.title
        known.tags, known.status = " ".join(fields.tags), fields.status
        known.publish = fields.publish
        known.body_hash, known.revision = hash(fields.body), known.revision + 1
        known.aliases, known.extra = aliases, p.front_matter
        known.slug = (index.unique_slug(known, entries.slugify(fields.title))
                      if known.kind == "entry" else known.iso_week.lower())
        index.add(known)
        ops.append(Op(p.path, known, known.copy(), before, fields.body))
    return ops, untouched


def describe(op: Op, root: Path) -> str:
    """One line of a dry run's plan."""
    verb = "create" if op.before is None else "update"
    after = op.after
    return (f"{verb} {op.path.relative_to(root).as_posix()}: {after.kind} {after.title!r} "
            f"of {after.date.isoformat()}")
