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
import stat
import threading
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

import sqlalchemy as sa
import yaml
from sqlalchemy.orm import Session

from app.models import Entry
from app.notebook import embeds, note_paths, vault_names, vault_uploads
from base.durable import write_atomic

log = logging.getLogger(__name__)
ENTRY_FILE_RE = re.compile(r"^(\d{4}-\d{2}-\d{2})(?:[-_ ]+(.*))?$")
LETTER_FILE_RE = re.compile(r"^(\d{4})-W(\d{2})$")
# libyaml's parser where installed (same safe constructors, several times faster)
SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
# and its emitter, faster than PyYAML's, but only where it writes the same bytes (see
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


# The keys to_text writes (and the export's: "commonplace-id", vault_names.KEY); a file's
# other keys are kept with its entry as they were (Entry.front_matter), written after these.
WRITTEN_KEYS = frozenset(("title", "date", "kind", "week", "tags", "status", "publish",
                          "aliases", "commonplace-id", vault_names.KEY))
MAX_FRONT_MATTER = 20_000  # characters of kept keys, as YAML


def export_id(entry_id: int, created_at: dt.datetime) -> str:
    """What names an entry in an export's front matter (`commonplace-id`), so importing
    the export into the same notebook finds the entry again (import_plan.plan): its id and
    the moment it was made, which no entry of another notebook shares."""
    return f"{entry_id}-{created_at:%Y%m%d%H%M%S%f}"


def relpath(entry: Entry) -> Path:
    if entry.kind == "week":
        return Path(entry.iso_week[:4]) / f"{entry.iso_week}.md"
    return Path(f"{entry.date.year:04d}") / f"{entry.date.isoformat()}-{entry.slug}.md"


def to_text(entry: Entry, body: str | None = None) -> str:
    """The entry's file: front matter, then `body` (its markdown unless given)."""
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
    front += getattr(entry, "front_matter", None) or ""  # the file's own keys, as they came
    body = entry.body_md if body is None else body
    return f"---\n{front}---\n{body}\n" if body else f"---\n{front}---\n"


# -- queued on the session, written after the commit ------------------------------------


@dataclass
class _Pending:
    writes: dict[int | str, tuple[Path, str]] = field(default_factory=dict)
    removes: set[Path] = field(default_factory=set)


def _pending(session: Session) -> _Pending | None:
    if not session.info.get("notes_dir"):
        return None  # a session without a data directory (e.g. a migration) mirrors nothing
    return session.info.setdefault("mirror", _Pending())


def file_text(session: Session, entry: Entry, up: int = 1) -> tuple[str, dict[str, str]]:
    """The entry's file with what its embeds show written in (embeds.in_files), and the
    files that needs; `up`: how deep under the folder the file lies. Written alone, the
    file links only the cards it holds itself."""
    here = relpath(entry).as_posix()
    own = embeds.linker(dict.fromkeys(embeds.anchors(entry.body_md), here), here)
    body, files = embeds.in_files(session, entry.body_md, up, link=own)
    return to_text(entry, body), files


def queue_write(session: Session, entry: Entry, old: Path | None = None) -> None:
    text, files = file_text(session, entry)
    queue_file(session, entry.id, relpath(entry), text, old)
    for path, drawn in files.items():
        queue_file(session, path, Path(path), drawn)  # type: ignore[arg-type]


def queue_file(session: Session, entry_id: int | str, new: Path, text: str,
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


def restore_lost(db, untouched: list) -> None:
    """An import killed between a commit and its mirror files: the files of `untouched`
    (entries the import left as they were) that are not there, written now."""
    root = db.notes_dir
    if root is None:
        return
    lost = [k.id for k in untouched if not (Path(root) / relpath(k)).exists()]
    with db.read() as session:
        for i in range(0, len(lost), 500):
            found = session.scalars(sa.select(Entry).where(Entry.id.in_(lost[i:i + 500])))
            write_many(Path(root), [(relpath(e), file_text(session, e)[0]) for e in found])


# -- reading a file back -----------------------------------------------------------------

# A note is at most entries.MAX_BODY characters, 4 bytes each at the most: a larger file is
# refused from its size, before a byte of it is read.
MAX_NOTE_BYTES = 4_000_000
DATE_IN_NAME_RE = re.compile(r"(?<!\d)(\d{4})-(\d{2})-(\d{2})(?!\d)")
# Where a YAML alias (*name) could begin a node; only front matter that has one is read by
# the slower loader that refuses them.
_MAYBE_ALIAS_RE = re.compile(r"(?:^|[\s\[{,])\*", re.M)


class _NoAliasLoader(yaml.SafeLoader):
    """PyYAML's safe loader, less aliases: nine levels of nested aliases in a few hundred
    bytes expand to billions of nodes (a "billion laughs"), and a note needs none."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            raise yaml.composer.ComposerError(None, None, "YAML aliases (*name) are not read",
                                              self.peek_event().start_mark)
        return super().compose_node(parent, index)


@dataclass
class Parsed:
    path: Path
    source: str  # its path inside the imported folder, "/"-separated: its identity
    kind: str
    date: dt.date
    title: str
    body: str
    tags: list[str]  # as written; the import keeps those a tag may be (import_plan)
    status: str
    publish: bool = False  # Obsidian Publish's own key
    aliases: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # what was read otherwise than written
    front_matter: str | None = None  # the keys no field holds, as YAML (WRITTEN_KEYS)
    export_id: str | None = None  # "commonplace-id:", an export's (export_id)


def read_note(path: Path, follow_symlinks: bool = True) -> tuple[str, float]:
    """A note's text and modification time. Only a regular file is read (a FIFO named
    x.md would block the import for ever; O_NONBLOCK opens it without waiting for a
    writer), and only one of at most MAX_NOTE_BYTES, checked before reading."""
    flags = os.O_RDONLY | os.O_NONBLOCK | (0 if follow_symlinks else os.O_NOFOLLOW)
    fd = os.open(path, flags)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError("not a regular file (not imported)")
        if info.st_size > MAX_NOTE_BYTES:
            raise ValueError(f"{info.st_size} bytes: a note is at most {MAX_NOTE_BYTES} bytes "
                             "(not imported)")
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(MAX_NOTE_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_NOTE_BYTES:  # it grew since
        raise ValueError(f"more than {MAX_NOTE_BYTES} bytes: not imported")
    return data.decode("utf-8").removeprefix("\ufeff").replace("\r\n", "\n"), info.st_mtime


def _front_matter(text: str, warnings: list[str]) -> tuple[dict, str]:
    if not text.startswith("---\n"):
        return {}, text
    end = text.find("\n---\n", 4)
    if end == -1 and text.endswith("\n---"):
        end = len(text) - 4
    if end == -1:
        return {}, text
    raw = text[4:end]
    loader = _NoAliasLoader if _MAYBE_ALIAS_RE.search(raw) else SafeLoader
    try:
        meta = yaml.load(raw, Loader=loader) or {}
    except (yaml.YAMLError, RecursionError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        warnings.append(f"front matter not read ({first}): kept as text")
        return {}, text
    if not isinstance(meta, dict):
        warnings.append("front matter is not a mapping: kept as text")
        return {}, text
    return meta, text[end + 5:]


def _a_date(value) -> dt.date | None:
    if isinstance(value, dt.datetime):
        value = value.date()
    if not isinstance(value, dt.date):
        found = DATE_IN_NAME_RE.match(str(value or "").strip())
        try:
            value = dt.date(int(found[1]), int(found[2]), int(found[3])) if found else None
        except ValueError:
            return None
    return value if value is not None and 1900 <= value.year <= 2999 else None


def _strings(value) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [str(v) for v in value if v is not None and not isinstance(v, (dict, list))]
    return [str(value)]


def parse_file(path: Path, follow_symlinks: bool = True, root: Path | None = None) -> Parsed:
    """Read one note as Obsidian reads it: its title is its file's name, unless front matter
    names another (`title:`); its date is front matter's `date:` or `created:`, else a date
    in its name, else the day it was last changed. Nothing in it is refused but a `publish:`
    other than true or false: what cannot be read as written (front matter, a tag, a
    status) is kept as text or left aside, and said in `warnings`. With follow_symlinks=False
    a link is refused when opened (O_NOFOLLOW), so it cannot be swapped in between listing
    the folder and reading it."""
    text, mtime = read_note(path, follow_symlinks)
    warnings: list[str] = []
    meta, body = _front_matter(text, warnings)
    source = note_paths.in_folder(path, root) if root is not None else path.name
    # less what an export wrote for the vault: the notes' own text, as the app keeps it
    body = vault_uploads.from_vault(embeds.without_shown(body), source)
    body = vault_names.from_vault(body, meta.get(vault_names.KEY))
    stem = unicodedata.normalize("NFC", path.stem)  # as note_paths.in_folder
    letter = LETTER_FILE_RE.match(stem)
    kind = meta.get("kind") or ("week" if letter else "entry")
    if kind not in ("entry", "week"):
        warnings.append(f"kind {str(kind)[:40]!r} read as entry")
        kind = "entry"
    date = _a_date(meta.get("date")) or _a_date(meta.get("created"))
    if date is None and letter and 1 <= int(letter[2]) <= 53:
        try:
            date = dt.date.fromisocalendar(int(letter[1]), int(letter[2]), 1)
        except ValueError:
            date = None
    if date is None:
        found = DATE_IN_NAME_RE.search(stem)
        date = _a_date(found[0]) if found else None
    if date is None:
        date = dt.datetime.fromtimestamp(mtime).date()
    title = " ".join(str(meta.get("title") or "").split()) or " ".join(stem.split()) or "Untitled"
    status = meta.get("status") or "published"
    if status not in ("draft", "published"):
        warnings.append(f"status {str(status)[:40]!r} read as published")
        status = "published"
    publish = meta.get("publish", False)
    if not isinstance(publish, bool):  # whether a note is public is never guessed
        raise ValueError(f"publish must be true or false, not {str(publish)[:40]!r}")
    aliases = _strings(meta.get("aliases")) or _strings(meta.get("alias"))
    found = meta.get("commonplace-id")
    return Parsed(path, source, kind, date, title[:200], body,
                  _strings(meta.get("tags")) or _strings(meta.get("tag")), status,
                  publish, [a for a in aliases if a.strip()][:50], warnings,
                  _kept(meta, warnings), str(found)[:100] if found else None)


def _kept(meta: dict, warnings: list[str]) -> str | None:
    """The front matter's keys that no field holds, as YAML, to be written back."""
    kept = {key: value for key, value in meta.items() if key not in WRITTEN_KEYS}
    if not kept:
        return None
    # block style throughout: a flow mapping ("{a: 1}") could not follow to_text's keys
    text = yaml.dump(kept, Dumper=yaml.SafeDumper, sort_keys=False, allow_unicode=True,
                     default_flow_style=False)
    if len(text) > MAX_FRONT_MATTER:
        warnings.append(f"front matter keys left aside: {len(text)} characters of YAML, "
                        f"more than {MAX_FRONT_MATTER}")
        return None
    return text
