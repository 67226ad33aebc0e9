"""`commonplace export DIR`: the notebook as a folder that Obsidian opens as a vault and
`commonplace import` reads back as the same notebook.

A file per entry, named by its title (characters no file name may hold left out, a
number added where two would share a name), an imported note at its own path again (so
its [[links]] reach it as they did), a letter by its week ([[2024-W13]]); front matter
with its title, date, tags, status and aliases (mirror.to_text's, which import reads);
attachments beside the notes, an imported one at its own path, an upload under
attachments/<its hash>/, and links to an upload's address made links to that file
(vault_uploads.py, which import reads back); a note or an attachment named as a device
Windows keeps given a name it can create, and the links to it made to reach it
(vault_names.py, which import reads back too); after each ```run block, its card as
markdown with its chart (embeds.in_files: run-cards/), and the runs a card or a week's
changes name linked to the file where their card is (embeds.linker), never to the app.
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath

import sqlalchemy as sa
import yaml

from app.models import Attachment, Entry, EntryAlias
from app.notebook import embeds, vault_names, vault_uploads
from app.notebook.attachments import path_for
from app.notebook.mirror import export_id, to_text
from base.durable import write_atomic

# What Windows, macOS or Obsidian's links cannot hold in a name ([[a#b]] is a heading)
_FORBIDDEN_RE = re.compile(r'[\\/:*?"<>|#^\[\]\x00-\x1f\x7f]+')


# A file name is at most 255 bytes: a title's 120 characters may be 480 of them (CJK,
# emoji). Room is left for a number that makes the name unique, and ".md".
MAX_NAME_BYTES = 200


def file_name(title: str) -> str:
    name = " ".join(_FORBIDDEN_RE.sub(" ", title).split()).strip(". ")[:120]
    name = name.encode()[:MAX_NAME_BYTES].decode(errors="ignore").rstrip(". ")
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


def _text(entry: Entry, aliases: list[str], uploads: set[tuple[str, str]], body: str,
          up: int) -> str:
    body, rewritten = vault_names.to_vault(body)
    text = to_text(entry, body)
    # after the front matter's first line (mirror.to_text owns the rest): what names the
    # entry, so importing this folder into the same notebook finds it (import_plan.plan)
    listed = yaml.safe_dump({"commonplace-id": export_id(entry.id, entry.created_at)},
                            default_flow_style=False)
    if aliases:
        listed += yaml.safe_dump({"aliases": aliases}, allow_unicode=True,
                                 default_flow_style=None)
    if rewritten:
        listed += yaml.safe_dump({vault_names.KEY: rewritten}, allow_unicode=True,
                                 default_flow_style=False)
    return vault_uploads.to_vault("---\n" + listed + text[4:], uploads, up)


def export_vault(db, folder: Path) -> tuple[int, int]:
    """Write the notebook under `folder`; returns (notes, attachments) written."""
    data_dir = Path(db.notes_dir).parent if db.notes_dir else None
    names = _Names()
    with db.read() as session:
        stored: dict[str, Path] = {}  # the content at hand, by hash
        for sha in session.scalars(sa.select(Attachment.sha256).distinct()):
            where = path_for(data_dir, sha) if data_dir else None
            if where is not None and where.exists():
                stored[sha] = where
        files = 0
        written: dict[str, str] = {}  # path (any case) -> hash of what it holds
        for found in session.scalars(sa.select(Attachment).where(Attachment.path.is_not(None))
                                     .order_by(Attachment.path, Attachment.id)):
            if found.sha256 in stored and _inside(found.path):
                where = names.take(vault_names.windows_safe(found.path))
                written[where.lower()] = found.sha256
                write_atomic(folder / where, stored[found.sha256].read_bytes())
                files += 1
        # an upload, and any other content a note links by address, at attachments/<hash>/
        uploads = {(a.sha256, a.filename) for a in session.scalars(
            sa.select(Attachment).where(Attachment.path.is_(None)))}
        entries = session.scalars(sa.select(Entry).order_by(
            Entry.source_path.is_(None), Entry.source_path, Entry.date, Entry.id)).all()
        for entry in entries:
            uploads |= vault_uploads.linked(entry.body_md)
        exported: set[tuple[str, str]] = set()
        for sha, name in sorted(uploads):
            wanted = vault_uploads.path(sha, name)
            if sha not in stored or (wanted.lower() in names.taken
                                     and written.get(wanted.lower()) != sha):
                continue  # not at hand, or its place holds another file (never, in practice)
            exported.add((sha, name))
            if wanted.lower() in written:
                continue  # imported there: written already
            written[names.take(wanted).lower()] = sha
            write_atomic(folder / wanted, stored[sha].read_bytes())
            files += 1
        aliases: dict[int, list[str]] = {}
        for entry_id, key in session.execute(sa.select(EntryAlias.entry_id, EntryAlias.key)
                                             .order_by(EntryAlias.key)):
            aliases.setdefault(entry_id, []).append(key)
        placed: list[tuple[Entry, str]] = []
        # imported notes first: each takes its own path back
        for entry in entries:
            if entry.source_path and _inside(entry.source_path):
                wanted = entry.source_path
            elif entry.kind == "week":
                wanted = f"{entry.iso_week}.md"
            else:
                wanted = f"{file_name(entry.title)}.md"
            placed.append((entry, names.take(vault_names.windows_safe(wanted))))
        anchored: dict[str, str] = {}  # anchor -> the first file that shows it (a run's card)
        for entry, path in placed:
            for anchor in embeds.anchors(entry.body_md):
                anchored.setdefault(anchor, path)
        for entry, path in placed:
            up = path.count("/")
            body, drawn = embeds.in_files(session, entry.body_md, up,
                                          link=embeds.linker(anchored, path))
            write_atomic(folder / path, _text(entry, aliases.get(entry.id, []), exported, body,
                                              up))
            for where, text in drawn.items():
                write_atomic(folder / where, text)
    return len(placed), files
