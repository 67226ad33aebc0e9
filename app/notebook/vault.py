"""`commonplace export DIR`: the notebook as a folder that Obsidian opens as a vault and
`commonplace import` reads back as the same notebook.

A file per entry, named by its title (characters no file name may hold left out, a
number added where two would share a name), an imported note at its own path again (so
its [[links]] reach it as they did), a letter by its week ([[2024-W13]]); front matter
with its title, date, tags, status and aliases (mirror.to_text's, which import reads);
attachments beside the notes, an imported one at its own path, an upload under
attachments/, and links to an upload's address made vault links to that file; after each
```run block, its card as markdown with its chart (embeds.in_files: run-cards/).
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath

import sqlalchemy as sa
import yaml

from app.models import Attachment, Entry, EntryAlias
from app.notebook import embeds
from app.notebook.attachments import path_for
from app.notebook.mirror import export_id, to_text
from base.durable import write_atomic

# What Windows, macOS or Obsidian's links cannot hold in a name ([[a#b]] is a heading)
_FORBIDDEN_RE = re.compile(r'[\\/:*?"<>|#^\[\]\x00-\x1f\x7f]+')
_UPLOAD_RE = re.compile(r"(!?)\[([^\]\n]*)\]\(/attachments/([0-9a-f]{64})/([^)\s]+)\)")


def file_name(title: str) -> str:
    name = " ".join(_FORBIDDEN_RE.sub(" ", title).split()).strip(". ")[:120].rstrip(". ")
    return name or "Untitled"


def _inside(path: str) -> bool:
    """An imported path that stays inside the folder it is written to."""
    parts = PurePosixPath(path).parts
    return bool(parts) and not path.startswith("/") and ".." not in parts and "\\" not in path


class _Names:
    """File paths, unique without regard to case (as on macOS and Windows)."""

    def __init__(self) -> None:
        self.taken: set[str] = set()

    def take(self, wanted: str) -> str:
        stem, dot, ext = wanted.rpartition(".")
        path, n = wanted, 1
        while path.lower() in self.taken:
            n += 1
            path = f"{stem} {n}{dot}{ext}"
        self.taken.add(path.lower())
        return path


def _text(entry: Entry, aliases: list[str], uploads: dict[str, str], body: str) -> str:
    text = to_text(entry, body)
    # after the front matter's first line (mirror.to_text owns the rest): what names the
    # entry, so importing this folder into the same notebook finds it (import_plan.plan)
    listed = yaml.safe_dump({"commonplace-id": export_id(entry.id, entry.created_at)},
                            default_flow_style=False)
    if aliases:
        listed += yaml.safe_dump({"aliases": aliases}, allow_unicode=True,
                                 default_flow_style=None)
    text = "---\n" + listed + text[4:]

    def vault_link(m: re.Match[str]) -> str:
        path = uploads.get(m[3])
        if path is None:
            return m[0]
        return f"![[{path}]]" if m[1] else f"[[{path}|{m[2] or path}]]"

    return _UPLOAD_RE.sub(vault_link, text) if "/attachments/" in text else text


def export_vault(db, folder: Path) -> tuple[int, int]:
    """Write the notebook under `folder`; returns (notes, attachments) written."""
    data_dir = Path(db.notes_dir).parent if db.notes_dir else None
    names = _Names()
    with db.read() as session:
        uploads: dict[str, str] = {}
        files = 0
        for found in session.scalars(sa.select(Attachment).order_by(
                Attachment.path.is_(None), Attachment.path, Attachment.id)):
            stored = path_for(data_dir, found.sha256) if data_dir else None
            if stored is None or not stored.exists():
                continue
            if found.path and _inside(found.path):
                where = names.take(found.path)
            elif found.sha256 in uploads:
                continue
            else:
                where = names.take(f"attachments/{found.filename}")
            uploads.setdefault(found.sha256, where)
            write_atomic(folder / where, stored.read_bytes())
            files += 1
        aliases: dict[int, list[str]] = {}
        for entry_id, key in session.execute(sa.select(EntryAlias.entry_id, EntryAlias.key)
                                             .order_by(EntryAlias.key)):
            aliases.setdefault(entry_id, []).append(key)
        notes = 0
        # imported notes first: each takes its own path back
        for entry in session.scalars(sa.select(Entry).order_by(
                Entry.source_path.is_(None), Entry.source_path, Entry.date, Entry.id)):
            if entry.source_path and _inside(entry.source_path):
                wanted = entry.source_path
            elif entry.kind == "week":
                wanted = f"{entry.iso_week}.md"
            else:
                wanted = f"{file_name(entry.title)}.md"
            path = names.take(wanted)
            body, drawn = embeds.in_files(session, entry.body_md, path.count("/"))
            write_atomic(folder / path, _text(entry, aliases.get(entry.id, []), uploads, body))
            for where, text in drawn.items():
                write_atomic(folder / where, text)
            notes += 1
    return notes, files
