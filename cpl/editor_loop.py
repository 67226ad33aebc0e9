"""Editing an entry in $EDITOR, saved from the revision it started from.

1. The body goes into a 0600 temporary file (in $XDG_RUNTIME_DIR when there is one) and
   the editor runs: COMMONPLACE_EDITOR, VISUAL, EDITOR, the config's `editor`, then vi.
2. A buffer that comes back byte-for-byte the same (compared by hash, not mtime) sends
   nothing: "no changes". An emptied buffer sends nothing either.
3. The save carries `base_revision`. If the entry changed meanwhile the server merges the
   two line by line; only changes to the same lines come back as 409.
4. On a 409 the buffer is written to a draft file first (nothing typed is ever lost), both
   sides are shown as diffs against the base, and the user chooses: merge (the editor
   opens the text with conflict markers; a buffer still holding markers is never sent),
   overwrite (save the buffer over what is there now), or keep (exit 3; `--resume` later).
5. A network failure keeps the draft too (exit 6). Edits are never queued: only the
   person can tell whether an edit still makes sense later.
A draft is removed once a save of it succeeds.
"""

from __future__ import annotations

import datetime as dt
import difflib
import hashlib
import os
import re
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import click
from rich.text import Text

from base.durable import write_private
from cpl.api_client import Api
from cpl.failures import CONFLICT, ERROR, NOT_FOUND, OK, ApiError, CplError, Unreachable
from cpl.profile import drafts_dir
from cpl.terminal import Out

CHOICES = ("merge", "overwrite", "keep")
DRAFT_RE = re.compile(r"^entry-(\d+)-base-(\d+)-(\d{8}T\d{6}\d*)\.md$")
THEIRS, SEPARATOR, MINE = "<<<<<<< ", "=======", ">>>>>>> "


# -- the editor ---------------------------------------------------------------------------


def editor_command(config: dict) -> list[str]:
    for value in (os.environ.get("COMMONPLACE_EDITOR"), os.environ.get("VISUAL"),
                  os.environ.get("EDITOR"), config.get("editor")):
        if value:
            return shlex.split(str(value))
    return ["vi"]


def run_editor(text: str, name: str, config: dict) -> str:
    """The text after the person edited it. The temporary file is removed either way."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    folder = runtime if runtime and os.path.isdir(runtime) else None
    fd, path = tempfile.mkstemp(prefix=name, suffix=".md", dir=folder)  # mode 0600
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        command = [*editor_command(config), path]
        try:
            code = subprocess.call(command)
        except FileNotFoundError:
            raise CplError(f"cannot start the editor {command[0]!r}",
                           "set VISUAL or EDITOR (e.g. export EDITOR=nano)") from None
        edited = _utf8_or_kept(Path(path).read_bytes(), name)
        if code != 0:
            raise EditorFailed(code, edited)
        return edited
    finally:
        Path(path).unlink(missing_ok=True)


def _utf8_or_kept(raw: bytes, name: str) -> str:
    # An editor set to another encoding (vim's fileencoding=latin1): the file is about to
    # be removed, so what was written is kept among the drafts before saying so.
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        kept = drafts_dir() / f"{name}not-utf8-{dt.datetime.now():%Y%m%dT%H%M%S%f}.md"
        write_private(kept, raw)
        raise CplError(f"the editor saved text that is not UTF-8 (byte 0x{raw[exc.start]:02x} "
                       f"at offset {exc.start}); it is kept as it was in {kept}",
                       "save it as UTF-8 and try again") from None


class EditorFailed(Exception):
    def __init__(self, code: int, text: str):
        super().__init__(f"the editor exited with status {code}")
        self.text = text


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def has_markers(text: str) -> bool:
    return any(line.startswith((THEIRS, MINE)) or line in (THEIRS.strip(), MINE.strip())
               for line in text.splitlines())


# -- drafts -------------------------------------------------------------------------------


@dataclass
class Draft:
    path: Path
    entry_id: int
    base_revision: int
    saved_at: str

    def text(self) -> str:
        return self.path.read_text(encoding="utf-8")


def save_draft(entry_id: int, base_revision: int, text: str, path: Path | None = None) -> Path:
    if path is None:
        stamp = dt.datetime.now().strftime("%Y%m%dT%H%M%S%f")
        path = drafts_dir() / f"entry-{entry_id}-base-{base_revision}-{stamp}.md"
    write_private(path, text)
    return path


def rekeep(entry_id: int, base_revision: int, text: str, kept: Path | None) -> Path:
    """The draft again, named for the revision it now stands on."""
    path = save_draft(entry_id, base_revision, text)
    if kept is not None and kept != path:
        kept.unlink(missing_ok=True)
    return path


def drafts() -> list[Draft]:
    found = []
    for path in sorted(drafts_dir().glob("entry-*.md")):
        match = DRAFT_RE.match(path.name)
        if match:
            when = dt.datetime.strptime(match[3][:15], "%Y%m%dT%H%M%S")
            found.append(Draft(path, int(match[1]), int(match[2]), when.isoformat()))
    return found


def latest_draft(entry_id: int) -> Draft | None:
    mine = [d for d in drafts() if d.entry_id == entry_id]
    return mine[-1] if mine else None


# -- an edit, end to end ------------------------------------------------------------------


@dataclass
class Editing:
    api: Api
    out: Out
    config: dict
    on_conflict: str | None  # merge | overwrite | keep; None: ask on a terminal, else keep

    def entry(self, entry_id: int, *, resume: bool = False) -> int:
        entry = self.api.get(f"/api/v1/entries/{entry_id}")
        base_rev, base_text = entry["revision"], entry.get("body", "")
        draft = latest_draft(entry_id) if resume else None
        if resume and draft is None:
            raise CplError(f"there is no kept draft of entry {entry_id}",
                           "`cpl drafts` lists the drafts", exit_code=NOT_FOUND)
        start = base_text
        if draft is not None:
            start, base_rev = draft.text(), draft.base_revision
            base_text = self.api.get(f"/api/v1/entries/{entry_id}/revisions/{base_rev}")["body"]
            self.out.note(f"resuming {draft.path} (made from revision {base_rev})")
        # An editor's file ends in a newline (POSIX text): without one, a line appended at
        # the end joins the last line ("## Next" + "- item").
        if start and not start.endswith("\n"):
            start += "\n"
        try:
            mine = run_editor(start, f"cpl-entry-{entry_id}-r{base_rev}-", self.config)
        except EditorFailed as exc:
            if digest(exc.text) != digest(start):
                kept = save_draft(entry_id, base_rev, exc.text, draft.path if draft else None)
                raise CplError(f"{exc}; nothing sent", f"your text is kept in {kept}") from None
            raise CplError(f"{exc}; nothing sent") from None
        if draft is None and digest(mine) == digest(start):
            self.out.note("no changes: nothing sent")
            return OK
        if not mine.strip():
            self.out.note("the buffer is empty: nothing sent (delete an entry on its page)")
            return ERROR
        if has_markers(mine):
            kept = save_draft(entry_id, base_rev, mine, draft.path if draft else None)
            return self.markers_left(entry_id, kept)
        return self.save(entry, base_rev, base_text, mine, draft.path if draft else None)

    def save(self, entry: dict, base_rev: int, base_text: str, mine: str,
             kept: Path | None) -> int:
        entry_id = entry["id"]
        while True:
            try:
                saved = self.api.put(f"/api/v1/entries/{entry_id}",
                                     {"body": mine, "base_revision": base_rev})
            except Unreachable as exc:
                kept = save_draft(entry_id, base_rev, mine, kept)
                raise Unreachable(exc.message, f"Nothing was saved. Your text is kept in "
                                  f"{kept};\n`cpl edit {entry_id} --resume` sends it when the "
                                  "server answers again.") from None
            except ApiError as exc:
                kept = save_draft(entry_id, base_rev, mine, kept)
                if exc.status != 409 or exc.code != "conflict":
                    exc.hint = (exc.hint + "\n" if exc.hint else "") + \
                        f"Nothing was saved. Your text is kept in {kept}."
                    raise
                current = exc.error.get("current") or {}
                self.show_conflict(entry_id, exc.error, base_rev, base_text, mine, kept)
                choice = self.choose()
                if choice == "keep":
                    self.out.note(f"kept: your text is in {kept}\n"
                                  f"try again later with: cpl edit {entry_id} --resume "
                                  "(it merges with what is saved by then)")
                    return CONFLICT
                # Either way the text now stands on what is saved: save from there.
                base_rev, base_text = current.get("revision", base_rev), current.get("body", "")
                if choice == "merge":
                    try:
                        mine = run_editor(with_markers(exc.error, current, mine),
                                          f"cpl-merge-{entry_id}-", self.config)
                    except EditorFailed as failed:
                        kept = rekeep(entry_id, base_rev, failed.text, kept)
                        self.out.note(f"{failed}; nothing sent. The text with both sides is "
                                      f"kept in {kept}: cpl edit {entry_id} --resume")
                        return CONFLICT
                kept = rekeep(entry_id, base_rev, mine, kept)
                if has_markers(mine):
                    return self.markers_left(entry_id, kept)
                continue
            if kept is not None:
                kept.unlink(missing_ok=True)
            merged_with = saved.get("merged_with")
            self.out.note(f"saved entry {entry_id}, revision {saved.get('revision')}"
                          + (f" (merged with revision {merged_with}, saved meanwhile)"
                             if merged_with else ""))
            return OK

    def markers_left(self, entry_id: int, kept: Path) -> int:
        self.out.note(f"conflict markers (<<<<<<< / >>>>>>>) are still in the text: nothing "
                      f"sent. It is kept in {kept}; resolve it with: cpl edit {entry_id} "
                      "--resume")
        return CONFLICT

    def choose(self) -> str:
        if self.on_conflict:
            return self.on_conflict
        if not (sys.stdin.isatty() and sys.stdout.isatty()):
            return "keep"
        answer = click.prompt("[m]erge, [o]verwrite, or [k]eep the draft for later?",
                              default="keep", err=True)
        return next((c for c in CHOICES if c.startswith(answer.strip().lower()[:1] or "k")),
                    "keep")

    def show_conflict(self, entry_id: int, error: dict, base_rev: int, base_text: str,
                      mine: str, kept: Path) -> None:
        current = error.get("current") or {}
        rev = current.get("revision", "?")
        places = [h for h in error.get("conflicts") or [] if h.get("field") == "body"]
        where = ", ".join(_lines(h.get("start", 0), h.get("end", 0)) for h in places)
        self.out.note(f"entry {entry_id} was saved elsewhere while you edited (revision "
                      f"{base_rev} → {rev}), and both changed the same lines"
                      + (f" ({where})" if where else "") + ".", style="bold")
        self.out.note(f"your text is safe in {kept}")
        for title, other, label in ((f"saved meanwhile (revision {base_rev} → {rev})",
                                     current.get("body", ""), f"revision {rev}"),
                                    (f"your edit (from revision {base_rev})", mine, "yours")):
            self.out.note(f"── {title}", style="bold")
            self.show_diff(base_text, other, f"revision {base_rev}", label)
        self.out.note("choose: merge (edit a text with both sides marked), overwrite (your "
                      "text replaces theirs), or keep (decide later: cpl edit "
                      f"{entry_id} --resume)")

    def show_diff(self, before: str, after: str, old: str, new: str) -> None:
        styles = {"+": "added", "-": "removed", "@": "hunk"}
        for line in difflib.unified_diff(before.splitlines(), after.splitlines(), old, new,
                                         lineterm="", n=2):
            self.out.err.print(Text(line, style=styles.get(line[:1], "")), soft_wrap=True)


def _lines(start: int, end: int) -> str:
    """Base lines [start, end) in words (an insertion has start == end)."""
    if end - start <= 1:
        return f"line {start}"
    return f"lines {start}–{end - 1}"


def with_markers(error: dict, current: dict, mine: str) -> str:
    """The text to resolve: the server's offered merge (both sides kept, changes that did
    not overlap already combined) with each overlapping place marked, git-style."""
    rev = current.get("revision", "?")
    top, bottom = f"{THEIRS}theirs (revision {rev}, saved meanwhile)", f"{MINE}mine (your edit)"
    offered = (error.get("offered") or {}).get("body")
    hunks = [h for h in error.get("conflicts") or [] if h.get("field") == "body"]
    whole = "\n".join([top, current.get("body", ""), SEPARATOR, mine, bottom])
    if offered is None or not hunks:
        return whole
    lines, out, at = offered.split("\n"), [], 0
    for hunk in hunks:
        theirs, ours = list(hunk.get("theirs") or []), list(hunk.get("mine") or [])
        block = theirs + ours
        found = next((i for i in range(at, len(lines) - len(block) + 1)
                      if lines[i:i + len(block)] == block), None)
        if found is None:
            return whole
        out += [*lines[at:found], top, *theirs, SEPARATOR, *ours, bottom]
        at = found + len(block)
    return "\n".join(out + lines[at:])
