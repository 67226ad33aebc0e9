"""Attachments: files uploaded to an entry, stored once per content under
<data>/attachments/ab/abcdef… and referenced from markdown by URL.

The type is decided from the file's first bytes, never from the name or the browser's
claim, and only types that cannot run as a page on our origin are kept.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from pathlib import Path

from sqlalchemy.orm import Session

from app.errors import Invalid, TooLarge, Unsupported
from app.models import Attachment, Entry

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
            raise Unsupported(
                "only images (PNG, JPEG, GIF, WebP, SVG), PDF and plain text can be attached",
                "file",
            )
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
