"""Whole folders of plain markdown in and out: `commonplace import DIR` and `export DIR`.

Import is a use of the ordinary save (app/notebook/entries.py), so every imported file
is a revision, rendered, indexed and mirrored like a save from the editor. It is
idempotent: a file imported before with the same content changes nothing; a changed one
becomes a new revision of the same entry. Each file is its own transaction, so an import
interrupted half way leaves a consistent notebook.
"""

from __future__ import annotations

import os
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
    skipped: list[str] = field(default_factory=list)


def markdown_files(folder: Path, report: ImportReport) -> list[Path]:
    """Every *.md under `folder`, hidden ones aside. Symbolic links are skipped (and
    named in the report): a link named like a note could point anywhere on the disk, and
    importing it would publish that file to viewers and the feed."""
    found = []
    for root, dirs, files in os.walk(folder, followlinks=False):
        here = Path(root)
        for name in [d for d in dirs if (here / d).is_symlink()]:
            report.skipped.append(f"{here / name}: a symbolic link (not followed)")
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and not (here / d).is_symlink())
        for name in sorted(files):
            path = here / name
            if name.startswith(".") or not name.endswith(".md"):
                continue
            if path.is_symlink():
                report.skipped.append(f"{path}: a symbolic link (not imported)")
            else:
                found.append(path)
    return sorted(found)


def import_folder(db, folder: Path, author: str = "import") -> ImportReport:
    """Ingest every *.md under `folder`. Idempotent: a file already imported with the same
    content changes nothing; a changed one becomes a new revision of the same entry."""
    report = ImportReport()
    for path in markdown_files(folder, report):
        try:
            parsed = parse_file(path, follow_symlinks=False)
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
        except (OSError, ValueError, yaml.YAMLError, Refusal, UnicodeDecodeError) as exc:
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
