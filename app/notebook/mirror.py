"""The plain-markdown mirror: every saved entry is also a file the owner can walk away with.

    <data>/notes/2024/2024-03-31-parallelism-notes.md     an entry
    <data>/notes/2024/2024-W13.md                          the letter of ISO week 2024-W13

A save queues its file on the session (entries.apply); whoever commits the session writes
the queue right after (`commit`, or `write_queued` after a `db.write()` block), atomically
(base.durable: temp file, fsync, rename), so a rolled-back save never leaves a file
behind. This module
owns the file format (`to_text` writes it, `parse_file` reads it); moving whole folders in
and out is app/notebook/transfer.py.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from sqlalchemy.orm import Session

from app.models import Entry
from base.durable import write_atomic

log = logging.getLogger(__name__)
ENTRY_FILE_RE = re.compile(r"^(\d{4}-\d{2}-\d{2})(?:[-_ ]+(.*))?$")
LETTER_FILE_RE = re.compile(r"^(\d{4})-W(\d{2})$")
# libyaml's parser where installed (same safe constructors, several times faster)
SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
# and its emitter, ~5x faster than PyYAML's, but only where it writes the same bytes (see
# _short_and_plain): on long lines it wraps elsewhere, and it escapes what PyYAML writes as is
SafeDumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def _short_and_plain(title: str, tags: list[str]) -> bool:
    """Front matter that libyaml and PyYAML write alike, byte for byte (tests/
    test_bulk_import.py compares them on fuzzed titles): no line near the 80-column wrap,
    and no character outside ASCII but printable ones of the Basic Multilingual Plane."""
    limit = 60 if title.isascii() and all(tag.isascii() for tag in tags) else 40
    if len(title) > limit or sum(len(tag) + 4 for tag in tags) > limit:
        return False
    text = title + "".join(tags)
    return text.isascii() or all(
        c.isascii() or (c.isprintable() and not c.isspace() and c <= "\uffff") for c in text)


def relpath(entry: Entry) -> Path:
    if entry.kind == "week":
        return Path(entry.iso_week[:4]) / f"{entry.iso_week}.md"
    return Path(f"{entry.date.year:04d}") / f"{entry.date.isoformat()}-{entry.slug}.md"


def to_text(entry: Entry) -> str:
    meta: dict = {"title": entry.title, "date": entry.date}
    if entry.kind == "week":
        meta["kind"] = "week"
        meta["week"] = entry.iso_week
    meta["tags"] = entry.tag_list
    meta["status"] = entry.status
    if entry.publish:  # only when set, so a private entry's file reads as it always has
        meta["publish"] = True
    dumper = SafeDumper if _short_and_plain(entry.title, meta["tags"]) else yaml.SafeDumper
    front = yaml.dump(meta, Dumper=dumper, sort_keys=False, allow_unicode=True,
                      default_flow_style=None)
    body = entry.body_md
    return f"---\n{front}---\n{body}\n" if body else f"---\n{front}---\n"


# -- queued on the session, written after the commit ------------------------------------


@dataclass
class _Pending:
    writes: dict[int, tuple[Path, str]] = field(default_factory=dict)
    removes: set[Path] = field(default_factory=set)


def _pending(session: Session) -> _Pending | None:
    if not session.info.get("notes_dir"):
        return None  # a session without a data directory (e.g. a migration) mirrors nothing
    return session.info.setdefault("mirror", _Pending())


def queue_write(session: Session, entry: Entry, old: Path | None = None) -> None:
    queue_file(session, entry.id, relpath(entry), to_text(entry), old)


def queue_file(session: Session, entry_id: int, new: Path, text: str,
               old: Path | None = None) -> None:
    """queue_write with the file's place and text already worked out (bulk import)."""
    pending = _pending(session)
    if pending is None:
        return
    if old is not None and old != new:
        pending.removes.add(old)
    pending.removes.discard(new)
    pending.writes[entry_id] = (new, text)


def queue_delete(session: Session, entry: Entry) -> None:
    pending = _pending(session)
    if pending is None:
        return
    pending.writes.pop(entry.id, None)
    pending.removes.add(relpath(entry))


def commit(session: Session) -> None:
    """Commit the session, then write the files its saves queued."""
    session.commit()
    write_queued(session)


def write_queued(session: Session) -> None:
    """Write the files queued on a session that has committed (a `db.write()` block's,
    after the block). A session that rolled back is dropped with its queue, unwritten."""
    pending: _Pending | None = session.info.pop("mirror", None)
    if pending:
        apply(Path(session.info["notes_dir"]), list(pending.writes.values()),
              pending.removes)


def apply(root: Path, writes: list[tuple[Path, str]], removes: set[Path]) -> None:
    """Files moved away from (an entry renamed) removed, then `writes` written."""
    written = {path for path, _ in writes}
    for path in removes - written:
        (root / path).unlink(missing_ok=True)
    write_many(root, writes)


def write_many(root: Path, files: list[tuple[Path, str]]) -> None:
    """Write mirror files atomically. One is written as base.durable does (temporary
    file, fsync, rename, fsync of the folder); many at once (a bulk import's batch) are
    written to temporary files, flushed to disk together (one sync, not an fsync each),
    then renamed into place, so each file is still either the old one or the new one."""
    if len(files) < 8 or not hasattr(os, "sync"):
        for path, text in files:
            try:
                write_atomic(root / path, text)
            except OSError:
                # The database has the save; the file catches up on the next save or export.
                log.exception("could not write the markdown mirror file %s", root / path)
        return
    staged: list[tuple[Path, Path]] = []
    try:
        for path, text in files:
            final = root / path
            final.parent.mkdir(parents=True, exist_ok=True)
            tmp = final.parent / f".{final.name}.{os.getpid()}-{threading.get_ident()}.tmp"
            tmp.write_bytes(text.encode("utf-8"))
            staged.append((tmp, final))
        os.sync()
        for tmp, final in staged:
            os.replace(tmp, final)
        for folder in {final.parent for _, final in staged}:
            fd = os.open(folder, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    except OSError:
        log.exception("could not write %d markdown mirror files under %s", len(files), root)
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)


# -- reading a file back -----------------------------------------------------------------


@dataclass
class Parsed:
    path: Path
    kind: str
    date: dt.date
    slug: str | None  # from the file name, as written
    title: str
    body: str
    tags: list[str]
    status: str
    publish: bool = False  # Obsidian Publish's own key


def parse_file(path: Path, follow_symlinks: bool = True) -> Parsed:
    """Read one markdown file: front matter if it has some, else the date from its name.
    With follow_symlinks=False a link is refused when opened (O_NOFOLLOW), so it cannot be
    swapped in between listing the folder and reading the file."""
    flags = os.O_RDONLY | (0 if follow_symlinks else os.O_NOFOLLOW)
    with os.fdopen(os.open(path, flags), encoding="utf-8") as fh:
        text = fh.read().replace("\r\n", "\n")
    meta: dict = {}
    body = text
    if text.startswith("---\n"):
        end = text.find("\n---\n", 4)
        if end == -1 and text.endswith("\n---"):
            end = len(text) - 4
        if end != -1:
            meta = yaml.load(text[4:end], Loader=SafeLoader) or {}
            if not isinstance(meta, dict):
                raise ValueError("front matter is not a mapping")
            body = text[end + 5:]
    stem = path.stem
    letter = LETTER_FILE_RE.match(stem)
    named = ENTRY_FILE_RE.match(stem)
    kind = meta.get("kind") or ("week" if letter else "entry")
    if kind not in ("entry", "week"):
        raise ValueError(f"kind must be entry or week, not {kind!r}")
    raw_date = meta.get("date")
    if raw_date is None and letter:
        raw_date = dt.date.fromisocalendar(int(letter[1]), int(letter[2]), 1)
    if raw_date is None and named:
        raw_date = named[1]
    if raw_date is None:
        raise ValueError("no date: give front matter 'date:' or name the file YYYY-MM-DD-….md")
    date = raw_date if isinstance(raw_date, dt.date) else dt.date.fromisoformat(str(raw_date))
    if isinstance(date, dt.datetime):
        date = date.date()
    title = meta.get("title")
    if not title:
        heading = re.search(r"^# (.+)$", body, re.M)
        if heading:
            title = heading[1].strip()
        elif named and named[2]:
            title = re.sub(r"[-_]+", " ", named[2]).strip().capitalize()
        else:
            title = f"Week {stem}" if kind == "week" else date.isoformat()
    tags = meta.get("tags") or []
    if isinstance(tags, str):
        tags = tags.split()
    slug = named[2] if (named and kind == "entry" and named[2]) else None
    publish = meta.get("publish", False)
    if not isinstance(publish, bool):
        raise ValueError(f"publish must be true or false, not {publish!r}")
    return Parsed(path, kind, date, slug, str(title), body, [str(t) for t in tags],
                  str(meta.get("status") or "published"), publish)
