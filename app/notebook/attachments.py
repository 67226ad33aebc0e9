"""Attachments: files uploaded to an entry, stored once per content under
<data>/attachments/ab/abcdef… and referenced from markdown by URL.

The type is decided from the file's first bytes, never from the name or the browser's
claim, and only types that cannot run as a page on our origin are kept.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import tempfile
import unicodedata
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import sqlalchemy as sa
from sqlalchemy.orm import Session

from app.errors import Invalid, TooLarge, Unsupported
from app.models import Attachment, Entry
from app.notebook import note_paths, vault_names, vault_uploads

MAX_BYTES = 10 * 1024 * 1024
IMAGE_TYPES = {"image/png", "image/jpeg", "image/gif", "image/webp", "image/svg+xml"}


def sniff(head: bytes) -> str | None:
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if head.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if head.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    if head.startswith(b"%PDF-"):
        return "application/pdf"
    if head.startswith((b"ID3", b"\xff\xfb", b"\xff\xf3", b"\xff\xf2")):
        return "audio/mpeg"
    if head.startswith(b"OggS"):
        return "audio/ogg"
    if head.startswith(b"fLaC"):
        return "audio/flac"
    if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        return "audio/wav"
    if head[4:11] == b"ftypM4A":
        return "audio/mp4"
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:
        # A multi-byte character cut at the end of the sniffed window is still text.
        try:
            text = head[:-3].decode("utf-8")
        except UnicodeDecodeError:
            return None
    if "\x00" in text:
        return None
    lowered = text.lstrip("\ufeff \t\r\n").lower()
    if lowered.startswith(("<!doctype html", "<html", "<script", "<head", "<body")):
        return None  # an HTML page has no business being an attachment
    if "<svg" in lowered[:1024]:
        return "image/svg+xml"
    return "text/plain"


KINDS = "images (PNG, JPEG, GIF, WebP, SVG), PDF, audio (MP3, M4A, Ogg, FLAC, WAV) and plain text"


def safe_filename(name: str) -> str:
    base = os.path.basename((name or "").replace("\\", "/"))
    base = re.sub(r"[^A-Za-z0-9._-]+", "-", base).strip(".-")[:100]
    return base or "file"


def path_for(data_dir: Path, sha256: str) -> Path:
    return data_dir / "attachments" / sha256[:2] / sha256


def store(session: Session, data_dir: Path, entry: Entry, stream, filename: str) -> Attachment:
    """Copy `stream` into the store (refusing it if too large or of a kind we do not keep)
    and record it against `entry`."""
    digest = hashlib.sha256()
    tmp_dir = data_dir / "attachments" / "tmp"
    tmp_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=tmp_dir)
    size, head = 0, b""
    try:
        with os.fdopen(fd, "wb") as out:
            while chunk := stream.read(64 * 1024):
                size += len(chunk)
                if size > MAX_BYTES:
                    raise TooLarge(f"attachments are limited to {MAX_BYTES // (1024 * 1024)} MB",
                                   "file")
                if len(head) < 2048:
                    head += chunk[: 2048 - len(head)]
                digest.update(chunk)
                out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
        if size == 0:
            raise Invalid("the file is empty", "file")
        content_type = sniff(head)
        if content_type is None:
            raise Unsupported(f"only {KINDS} can be attached", "file")
        sha = digest.hexdigest()
        final = path_for(data_dir, sha)
        final.parent.mkdir(parents=True, exist_ok=True)
        if final.exists():
            os.unlink(tmp)
        else:
            os.replace(tmp, final)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    attachment = Attachment(entry_id=entry.id, sha256=sha, filename=safe_filename(filename),
                            content_type=content_type, size=size)
    session.add(attachment)
    session.flush()
    return attachment


def url_for_attachment(attachment: Attachment) -> str:
    return f"/attachments/{attachment.sha256}/{attachment.filename}"


def markdown_for(attachment: Attachment) -> str:
    url = url_for_attachment(attachment)
    if attachment.content_type in IMAGE_TYPES:
        return f"![{attachment.filename}]({url})"
    return f"[{attachment.filename}]({url})"


# -- files of an imported folder ----------------------------------------------------------


def _keep(data_dir: Path, sha: str, data: bytes) -> None:
    final = path_for(data_dir, sha)
    if final.exists():
        return
    final.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=final.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, final)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def import_file(session: Session, data_dir: Path, root: Path, path: Path, *,
                dry_run: bool = False) -> str:
    """A file of an imported folder that is not a note, kept as an attachment under its
    path there ("Attachments/Image 1.png"; stored once per content): "added", "updated"
    (new content at that path) or "unchanged". ValueError says why it is not kept: only a
    regular file (O_NONBLOCK: a FIFO is not waited on) of a kind uploads may be, checked by
    its size before it is read and by its first bytes after. An export's copy of one of the
    notebook's uploads (vault_uploads.path) is that upload: unchanged, no new row."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError("not a regular file (not imported)")
        if info.st_size > MAX_BYTES:
            raise ValueError(f"{info.st_size} bytes: attachments are at most {MAX_BYTES} bytes")
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(MAX_BYTES + 1)
    finally:
        os.close(fd)
    if not data or len(data) > MAX_BYTES:
        raise ValueError("empty" if not data else f"more than {MAX_BYTES} bytes")
    content_type = sniff(data[:2048])
    if content_type is None:
        raise ValueError(f"not a kind of file kept (only {KINDS})")
    sha = hashlib.sha256(data).hexdigest()
    where = note_paths.in_folder(path, root)
    row = session.scalar(sa.select(Attachment).where(Attachment.path == where))
    if row is not None and row.sha256 == sha:
        return "unchanged"
    if row is None and any(vault_names.windows_safe(p) == where for p in session.scalars(
            sa.select(Attachment.path).where(Attachment.sha256 == sha,
                                             Attachment.path.is_not(None)))):
        return "unchanged"  # an export's copy of a file, under a name Windows can create
    exported = vault_uploads.HASH_FOLDER_RE.fullmatch(where)
    if row is None and exported and exported[1] == sha and session.scalar(
            sa.select(Attachment.id).where(Attachment.sha256 == sha,
                                           Attachment.path.is_(None)).limit(1)):
        return "unchanged"  # an export's copy of one of this notebook's uploads
    if dry_run:
        return "added" if row is None else "updated"
    _keep(data_dir, sha, data)
    if row is None:
        session.add(Attachment(entry_id=None, sha256=sha, filename=safe_filename(path.name),
                               content_type=content_type, size=len(data), path=where,
                               name_key=file_key(where.rsplit("/", 1)[-1])))
        session.flush()
        return "added"
    row.sha256, row.content_type, row.size = sha, content_type, len(data)
    session.flush()
    return "updated"


def file_key(name: str) -> str:
    """What ![[name]] and an imported file's name_key match on: lowered and composed (NFC),
    as link_key (a decomposed macOS name is the one typed composed)."""
    return unicodedata.normalize("NFC", name.lower())


def _nearest(key: str, found: list) -> Attachment | None:
    """Of attachments named like `key`, the one at that path or ending so, shortest first."""
    found = [a for a in found
             if a.path and (a.path.lower() == key or a.path.lower().endswith("/" + key))]
    return min(found, key=lambda a: (a.path.count("/"), len(a.path), a.path, a.id)) \
        if found else None


def _keys(name: str) -> list[str]:
    """What ![[name]] is looked for by: its key, then that of the name an export gives a
    file Windows cannot name ("aux.png" written "aux_.png": vault_names)."""
    key = file_key(name.strip().lstrip("/"))
    safe = file_key(vault_names.windows_safe(key))
    return [key] if safe == key else [key, safe]


def find(session: Session, name: str) -> Attachment | None:
    """The attachment ![[name]] shows, as Obsidian finds it: by its path in the imported
    folder, or by its file name, case aside (the shortest path among several), or as an
    export names it for Windows; else the newest upload of that file name, case aside
    (uploads keep a safe form of their name, so the name written is compared in that
    form)."""
    for key in _keys(name):
        found = _nearest(key, session.scalars(sa.select(Attachment).where(
            Attachment.name_key == key.rsplit("/", 1)[-1])).all())
        if found is not None:
            return found
    if "/" in key:
        return None
    return session.scalar(
        sa.select(Attachment).where(sa.func.lower(Attachment.filename)
                                    == safe_filename(name).lower())
        .order_by(Attachment.created_at.desc(), Attachment.id.desc()).limit(1))


class _Row(NamedTuple):
    path: str
    sha256: str
    filename: str
    id: int


class Index:
    """`find` answered from memory, for an import's renderers (no database there): the
    imported files by name (uploads are not embedded by name in an imported folder)."""

    def __init__(self, session: Session):
        self.named: dict[str, list[_Row]] = {}  # plain rows: they travel to the renderers
        for found in session.execute(sa.select(
                Attachment.name_key, Attachment.path, Attachment.sha256, Attachment.filename,
                Attachment.id).where(Attachment.path.is_not(None))):
            self.named.setdefault(found[0] or "", []).append(_Row(*found[1:]))

    def url(self, name: str) -> str | None:
        for key in _keys(name):
            found = _nearest(key, self.named.get(key.rsplit("/", 1)[-1], []))
            if found is not None:
                return url_for_attachment(found)
        return None


def resolver(session: Session) -> Callable[[str], str | None]:
    """resolve_attachment(name) -> its URL or None, for the markdown pipeline (one render:
    a name written twice is looked up once)."""
    found: dict[str, str | None] = {}

    def resolve_attachment(name: str) -> str | None:
        if name not in found:
            attachment = find(session, name)
            found[name] = url_for_attachment(attachment) if attachment is not None else None
        return found[name]

    return resolve_attachment
