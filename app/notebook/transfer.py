"""Whole folders of plain markdown in and out: `commonplace import DIR` and `export DIR`.

Import is a use of the ordinary save (app/notebook/entries.py), so every imported file
is a revision, rendered, indexed and mirrored like a save from the editor. It is
idempotent: a file imported before with the same content changes nothing; a changed one
becomes a new revision of the same entry. Each file is its own transaction, so an import
interrupted half way leaves a consistent notebook.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import sqlalchemy as sa
import yaml

from app.errors import Refusal
from app.models import Entry
from app.notebook import entries
from app.notebook.isoweeks import iso_week
from app.notebook.mirror import parse_file, relpath, to_text
from jobs.lab.durable import write_atomic


@dataclass
class ImportReport:
    created: int = 0
    updated: int = 0
    unchanged: int = 0
    errors: list[str] = field(default_factory=list)


def import_folder(db, folder: Path, author: str = "import") -> ImportReport:
    """Ingest every *.md under `folder`. Idempotent: a file already imported with the same
    content changes nothing; a changed one becomes a new revision of the same entry."""
    report = ImportReport()
    for path in sorted(folder.rglob("*.md")):
        if any(part.startswith(".") for part in path.relative_to(folder).parts):
            continue
        try:
            parsed = parse_file(path)
            with db.write() as session:
                if parsed.kind == "week":
                    existing = session.scalar(sa.select(Entry).where(
                        Entry.kind == "week", Entry.iso_week == iso_week(parsed.date)))
                else:
                    # The file's name or its title: whichever named the entry last time.
                    slugs = {entries.slugify(parsed.slug or parsed.title),
                             entries.slugify(parsed.title)}
                    existing = session.scalar(sa.select(Entry).where(
                        Entry.kind == "entry", Entry.date == parsed.date,
                        Entry.slug.in_(slugs)).order_by(Entry.id).limit(1))
                fields = {"title": parsed.title, "body": parsed.body, "tags": parsed.tags,
                          "status": parsed.status}
                if existing is None:
                    entries.create(session, author=author, kind=parsed.kind, date=parsed.date,
                                   note=f"imported from {path.name}", **fields)
                    report.created += 1
                    continue
                before = existing.revision
                if parsed.kind == "entry":
                    fields["date"] = parsed.date
                entries.update(session, existing, fields, base_revision=existing.revision,
                               author=author, note=f"imported from {path.name}")
                if existing.revision == before:
                    report.unchanged += 1
                else:
                    report.updated += 1
        except (ValueError, yaml.YAMLError, Refusal, UnicodeDecodeError) as exc:
            report.errors.append(f"{path}: {exc}")
    return report


def export_folder(db, folder: Path) -> int:
    """Write every entry as a file under `folder`; returns how many."""
    count = 0
    with db.read() as session:
        for entry in session.scalars(sa.select(Entry).order_by(Entry.date, Entry.id)):
            write_atomic(folder / relpath(entry), to_text(entry))
            count += 1
    return count
