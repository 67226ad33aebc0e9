"""Whole folders of plain markdown in and out: `commonplace import DIR` and `export DIR`.

Any folder of markdown imports as it is, an Obsidian vault above all: every file is one
entry, found again by its path inside the folder on the next import (never by its title
or date), so no two files are ever one entry, and nothing is refused for what it lacks
(mirror.parse_file: the title is the file's name, the date its front matter's, its name's
or its last change's). Every other file of the folder is an attachment (attachments.py).
Every imported note is a revision, rendered, indexed and mirrored like a save from the
editor; a note imported before with the same content changes nothing; a changed one
becomes a new revision of the same entry. `import_folder` does it in bulk
(app/notebook/bulk_import.py: batches of a few hundred files per transaction, rendering in
a process pool), with the result of `import_folder_slowly`, a save per file through
app/notebook/entries.py, kept as the reference the tests compare it with. An import
interrupted half way leaves a consistent notebook, and running it again finishes the job.
The export (vault.py) writes a folder the same import reads back.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable
from pathlib import Path

import sqlalchemy as sa

from app.errors import Refusal
from app.models import Attachment, Entry
from app.notebook import (
    attachments,
    bulk_import,
    bulk_render,
    embeds,
    entries,
    import_plan,
    mirror,
    note_paths,
    vault_uploads,
)
from app.notebook.import_plan import ImportReport
from app.notebook.mirror import relpath, to_text
from base.durable import write_atomic

_CHART_RE = re.compile(r"^run-\d+\.svg$")
__all__ = ["ImportReport", "import_folder", "import_folder_slowly", "mirror_folder"]


def folder_files(folder: Path, report: ImportReport) -> tuple[list[Path], list[Path]]:
    """The notes (*.md) under `folder` and its other files, hidden ones aside. Only regular
    files: a symbolic link is skipped (and named in the report), since one named like a
    note could point anywhere on the disk, and importing it would publish that file to
    viewers and the feed; a FIFO, socket or device is skipped too (reading one could block
    the import for ever)."""
    notes, others = [], []
    for root, dirs, files in os.walk(folder, followlinks=False):
        here = Path(root)
        for name in [d for d in dirs if (here / d).is_symlink()]:
            report.skipped.append(f"{here / name}: a symbolic link (not followed)")
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and not (here / d).is_symlink())
        for name in sorted(files):
            path = here / name
            if name.startswith("."):
                continue
            mode = path.lstat().st_mode
            if stat.S_ISLNK(mode):
                report.skipped.append(f"{path}: a symbolic link (not imported)")
            elif not stat.S_ISREG(mode):
                report.skipped.append(f"{path}: not a regular file (not imported)")
            elif here == folder / embeds.FILES_DIR and _CHART_RE.match(name):
                report.skipped.append(f"{path}: a run card's chart, as an export draws it "
                                      "(the card itself is live here)")
            else:
                (notes if name.lower().endswith(".md") else others).append(path)
    return sorted(notes), sorted(others)


def import_attachments(db, folder: Path, paths: list[Path], report: ImportReport,
                       dry_run: bool = False) -> None:
    """The folder's other files as attachments, before its notes (which show them)."""
    data_dir = Path(db.notes_dir).parent if db.notes_dir else None
    if data_dir is None or not paths:
        return
    with db.write() as session:
        for path in paths:
            try:
                done = attachments.import_file(session, Path(data_dir), folder, path,
                                               dry_run=dry_run)
            except (OSError, ValueError) as exc:
                report.skipped.append(f"{path}: {exc}")
                continue
            report.attachments[done] = report.attachments.get(done, 0) + 1
            where = note_paths.in_folder(path, folder)
            exported = vault_uploads.HASH_FOLDER_RE.fullmatch(where)
            if exported and done != "unchanged" and not dry_run and session.scalar(
                    sa.select(Attachment.sha256).where(Attachment.path == where)) != exported[1]:
                report.warnings.append(
                    f"{path}: not the content its folder names (changed since the export?): "
                    "notes that link to it show the file the export held, where the notebook "
                    "has it")
            if dry_run and done != "unchanged":
                report.plan.append(f"attach {where} ({done})")
        if dry_run:
            session.rollback()


def import_folder(db, folder: Path, author: str = "import", *, workers: int | None = None,
                  progress: Callable[[int, int], None] | None = None,
                  dry_run: bool = False) -> ImportReport:
    """Ingest every file under `folder`, in bulk. Idempotent: a file already imported with
    the same content changes nothing; a changed one becomes a new revision of the same
    entry. `progress(done, total)` is called after each committed batch. With `dry_run`
    nothing is written: the report says what would be done (`plan`)."""
    report, folder = ImportReport(), Path(folder)
    notes, others = folder_files(folder, report)
    import_attachments(db, folder, others, report, dry_run=dry_run)
    return bulk_import.run(db, folder, notes, report, author=author, workers=workers,
                           progress=progress, dry_run=dry_run)


def import_folder_slowly(db, folder: Path, author: str = "import") -> ImportReport:
    """The same import as a save per file, one transaction each (entries.create/update),
    each file's entry chosen by the same plan: the reference for import_folder's result,
    and the bench's point of comparison."""
    report, folder = ImportReport(), Path(folder)
    notes, others = folder_files(folder, report)
    import_attachments(db, folder, others, report)
    parsed = [bulk_render.read(path, folder) for path in notes]
    in_folder = {note_paths.in_folder(path, folder) for path in notes}
    ops, _ = import_plan.plan(parsed, import_plan.existing(db), author, report, in_folder)
    for op in ops:
        known = op.after
        fields = {"title": known.title, "body": op.body, "tags": known.tag_list,
                  "status": known.status, "publish": known.publish}
        note = f"imported from {op.path.name}"
        try:
            with db.write() as session:
                if op.before is None:
                    entry = entries.create(session, author=author, kind=known.kind,
                                           date=known.date, note=note, source_path=known.source,
                                           aliases=list(known.aliases), **fields)
                else:
                    if known.kind == "entry":
                        fields["date"] = known.date
                    entry = entries.get(session, op.entity.id)  # type: ignore[arg-type]
                    entries.update(session, entry, fields, base_revision=entry.revision,
                                   author=author, note=note, aliases=list(known.aliases))
                if entry.front_matter != known.extra:  # the file's other keys (no field's)
                    entry.front_matter = known.extra
                    mirror.queue_write(session, entry)
            mirror.write_queued(session)
        except (Refusal, RecursionError) as exc:
            report.errors.append(f"{op.path}: could not be rendered "
                                 f"({type(exc).__name__}: {str(exc)[:200]})")
            if op.before is None:
                report.created -= 1
            else:
                report.updated -= 1
    return report


def mirror_folder(db, folder: Path) -> int:
    """Write every entry's mirror file (mirror.relpath, mirror.to_text) under `folder`, as
    the mirror of <data>/notes holds them (a restore writes its mirror anew); returns how
    many. `commonplace export` writes a vault instead (vault.py)."""
    count = 0
    with db.read() as session:
        for entry in session.scalars(sa.select(Entry).order_by(Entry.date, Entry.id)):
            write_atomic(folder / relpath(entry), to_text(entry))
            count += 1
    return count
