"""Whole folders of plain markdown in and out: `commonplace import DIR` and `export DIR`.

Every imported file is a revision, rendered, indexed and mirrored like a save from the
editor. It is idempotent: a file imported before with the same content changes nothing; a
changed one becomes a new revision of the same entry. `import_folder` does it in bulk
(app/notebook/bulk_import.py: batches of a few hundred files per transaction, rendering in
a process pool), with the result of `import_folder_slowly`, a save per file through
app/notebook/entries.py, kept as the reference the tests compare it with. An import
interrupted half way leaves a consistent notebook, and running it again finishes the job.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import sqlalchemy as sa
import yaml

from app.errors import Refusal
from app.models import Entry
from app.notebook import bulk_import, entries, mirror
from app.notebook.import_plan import ImportReport
from app.notebook.isoweeks import iso_week
from app.notebook.mirror import parse_file, relpath, to_text
from base.durable import write_atomic

__all__ = ["ImportReport", "export_folder", "import_folder", "import_folder_slowly"]


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


def import_folder(db, folder: Path, author: str = "import", *, workers: int | None = None,
                  progress: Callable[[int, int], None] | None = None) -> ImportReport:
    """Ingest every *.md under `folder`, in bulk. Idempotent: a file already imported with
    the same content changes nothing; a changed one becomes a new revision of the same
    entry. `progress(done, total)` is called after each committed batch."""
    report = ImportReport()
    paths = markdown_files(folder, report)
    return bulk_import.run(db, paths, report, author=author, workers=workers,
                           progress=progress)


def import_folder_slowly(db, folder: Path, author: str = "import") -> ImportReport:
    """The same import as a save per file, one transaction each (entries.create/update):
    the reference for import_folder's result, and the bench's point of comparison."""
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
                          "status": parsed.status, "publish": parsed.publish}
                if existing is None:
                    entries.create(session, author=author, kind=parsed.kind, date=parsed.date,
                                   note=f"imported from {path.name}", **fields)
                    report.created += 1
                else:
                    before = existing.revision
                    if parsed.kind == "entry":
                        fields["date"] = parsed.date
                    entries.update(session, existing, fields, base_revision=existing.revision,
                                   author=author, note=f"imported from {path.name}")
                    if existing.revision == before:
                        report.unchanged += 1
                    else:
                        report.updated += 1
            mirror.write_queued(session)
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
