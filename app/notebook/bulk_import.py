"""Importing a whole folder at bulk speed, with the result of a save per file.

A save per file (entries.create/update) asks the database for every wiki link (a scan
of the whole table for a title) and renders again every entry linking to the new one, so
an import slowed as the notebook grew (76 entries/s at 2k, 29/s at 45k). Here instead:

1. **Read.** Every file is read and parsed in a process pool.
2. **Plan.** In order, in memory (link_index.py), as the files come back from the pool:
   which entry each file creates or updates, its slug, its revision, or that it is
   unchanged, exactly as a save per file would decide, with the same refusals.
3. **Render.** Each changed note is rendered once, in the pool, links left as placeholders
   (bulk_render.py), a few batches ahead of the writer; a note with embeds is rendered
   there too, its embeds left open, and filled in by the writer (no markdown is rendered
   while the write lock is held).
4. **Write.** Batches of BATCH notes, one write transaction each (BEGIN IMMEDIATE, so the
   web serves reads and queues its writes in between): entry and revision rows, links,
   tags and the full-text rows in bulk, links placed against the notebook as it stands
   with this batch, and entries from earlier batches (or from before the import) that
   link to what this batch brought get their links placed again. Mirror files are
   written after each commit, as one batch (mirror.py).

So every committed batch leaves the notebook as a save per file would have left it at
that file; an interrupted import resumes by running it again (files already in are
unchanged; a mirror file lost to the interruption is written again).
"""

from __future__ import annotations

import concurrent.futures as cf
import ctypes
import functools
import gc
import multiprocessing
import os
import secrets
import signal
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa

from app.db import insert_many
from app.models import Entry, EntryAlias, EntryTag, Link, Revision, utcnow
from app.notebook import (
    attachments,
    bulk_render,
    embeds,
    entries,
    import_plan,
    mirror,
    note_paths,
    saving,
    search_index,
)
from app.notebook.bulk_render import Failed, Template, place_links, placeholder_re, read
from app.notebook.import_plan import ImportReport, Op
from app.notebook.link_index import Known, LinkIndex
from app.notebook.render.template import Template as Open

BATCH = 500  # notes per write transaction
CHUNK = 50  # notes per task sent to a worker
AHEAD = 3  # batches rendered ahead of the writer
# The writer's page cache, in KiB: SQLite's default, not app/db.py's smaller one for the many
# connections of a web worker. A batch inserts into the link and tag indexes all over the
# notebook: with half of it, the writer's thread took longer (docs/PERFORMANCE.md,
# *Importing*). A bigger cache than the default gained nothing.
WRITER_CACHE_KIB = 2000
# The parent holds every note, its plan and the link index until the end: millions of
# objects, which a collection of the oldest generation walks with the GIL held. At the
# default thresholds those took a large share of the writer's time (gc.callbacks;
# docs/PERFORMANCE.md, *Importing*); the import makes little cyclic garbage, so the oldest
# generation waits for this many collections of the middle one instead of 10.
OLDEST_GENERATION_AFTER = 1000
ENTRY = Entry.__table__  # rows written in bulk through Core, not one ORM object each
_UPDATE = ENTRY.update().where(ENTRY.c.id == sa.bindparam("_id"))


Progress = Callable[[int, int], None]


def run(db, root: Path, paths: list[Path], report: ImportReport, *, author: str = "import",
        workers: int | None = None, progress: Progress | None = None,
        dry_run: bool = False) -> ImportReport:
    """Import `paths`, files under `root` (their paths inside it are their identity); with
    `dry_run`, only plan it (report.plan)."""
    started = time.monotonic()
    if workers is None:
        workers = (os.cpu_count() or 1) if len(paths) > 200 else 0  # fewer: forking costs more
    with db.read() as session:  # the folder's files, for its notes' ![[embeds]]
        bulk_render.use_attachments(attachments.Index(session))
    pool = _pool(workers)
    thresholds = gc.get_threshold()
    gc.set_threshold(*thresholds[:2], OLDEST_GENERATION_AFTER)
    try:
        # planned as the files come back, in order: the parent plans while the pool reads
        reading = functools.partial(read, root=root)
        mapped = pool.map(reading, paths, chunksize=64) if pool else map(reading, paths)
        existing = import_plan.existing(db)
        committed = {id(known): known.copy() for known in existing}  # before planning
        in_folder = {note_paths.in_folder(path, root) for path in paths}
        ops, untouched = import_plan.plan(mapped, existing, author, report, in_folder)
        if dry_run:
            report.plan += [import_plan.describe(op, root) for op in ops]
            return report
        _Writer(db, pool, ops, committed, author, report, progress, len(paths)).run()
        search_index.finish_loading(db)
        mirror.restore_lost(db, untouched)
    finally:
        gc.set_threshold(*thresholds)
        if pool:
            pool.shutdown(cancel_futures=True)
    report.seconds = time.monotonic() - started
    return report


def _pool(workers: int) -> cf.ProcessPoolExecutor | None:
    if workers <= 0:
        return None
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    return cf.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context(method),
                                  initializer=_end_with_the_import,
                                  initargs=(os.getpid(), bulk_render.ATTACHMENTS[0]))


def _end_with_the_import(importer: int, found: attachments.Index) -> None:
    """A renderer ends when the import that started it does: killed (SIGKILL, Ctrl-C
    twice, the OOM killer), the import would otherwise leave its pool's workers waiting
    for ever on a queue no one feeds. Linux's parent-death signal; elsewhere nothing."""
    bulk_render.use_attachments(found)
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != importer:  # it died before we asked
        os._exit(1)


@dataclass
class _Holder:
    """An entry whose links may need placing again when a later batch commits."""

    tpl: Template | Open | None  # not a Template: filled in again in full (an embed)
    html_hash: int | None = None


class _Writer:
    def __init__(self, db, pool, ops, committed, author, report, progress, total):
        self.db, self.pool, self.ops, self.author = db, pool, ops, author
        self.report, self.progress, self.total = report, progress, total
        self.nonce = secrets.token_hex(16)
        self.placeholders = placeholder_re(self.nonce)
        self.embed_names = tuple(embeds.EMBEDS)
        self.index = LinkIndex()  # the notebook as committed (so far)
        self.resolve = self.index.resolve
        self.live: dict[int, Known] = committed  # id(entity) -> its entry in self.index
        self.creates_left = sum(op.before is None for op in ops)
        for known in committed.values():
            self.index.add(known)
        self.holders: dict[int, _Holder] = {}
        self.writer = cf.ThreadPoolExecutor(1, thread_name_prefix="mirror")
        self.files: list[cf.Future] = []
        self.by_key: dict[str, set[int]] = {}
        self.last_change: dict[str, int] = {}  # link key -> the last batch that changes it
        for i, op in enumerate(ops):
            for key in op.changed_keys:
                self.last_change[key] = i // BATCH

    def run(self) -> None:
        self._hold_linkers_from_before()
        batches = [self.ops[i:i + BATCH] for i in range(0, len(self.ops), BATCH)]
        pending: deque = deque()
        done = self.total - len(self.ops)
        for number in range(len(batches)):
            while len(pending) < AHEAD and number + len(pending) < len(batches):
                pending.append(self._render(batches[number + len(pending)]))
            done_batch = [one for future in pending.popleft() for one in _result(future)]
            self._commit(number, batches[number], done_batch)
            done += len(batches[number])
            if self.progress:
                self.progress(done, self.total)
        if self.progress and not batches:
            self.progress(self.total, self.total)
        self.writer.shutdown(wait=True)
        for written in self.files:
            written.result()

    def _render(self, batch: list) -> list:
        """Tasks rendering `batch` (ops, or bodies of entries already in) in the pool;
        each result is (template or None, the op's mirror file text or None)."""
        jobs = [(op, self.nonce, self.embed_names) if isinstance(op, str) else
                ((op.body, self.nonce, self.embed_names), (op.after, op.body))
                for op in batch]
        chunks = [jobs[i:i + CHUNK] for i in range(0, len(jobs), CHUNK)]
        if self.pool is None:
            return [bulk_render.templates(chunk) for chunk in chunks]
        return [self.pool.submit(bulk_render.templates, chunk) for chunk in chunks]

    def _hold_linkers_from_before(self) -> None:
        """Entries already in the notebook that link to what this import brings."""
        if not self.last_change:
            return
        with self.db.read() as session:
            linkers: dict[int, set[str]] = {}
            for source, key in session.execute(sa.select(Link.source_id, Link.target_key)):
                linkers.setdefault(source, set()).add(key)
            wanted = sorted(i for i, keys in linkers.items() if keys & self.last_change.keys())
            rows = [session.execute(sa.select(Entry.id, Entry.body_md).where(
                Entry.id.in_(chunk))).all() for chunk in _chunks(wanted, 500)]
        rows = [row for chunk in rows for row in chunk]
        templates = [tpl for future in self._render([r.body_md for r in rows])
                     for tpl, _ in _result(future)]
        for row, tpl in zip(rows, templates, strict=True):
            if isinstance(tpl, Failed):
                continue  # (it rendered when it was saved; its stored HTML stays)
            self._hold(row.id, tpl, -1, None if isinstance(tpl, Template) else linkers[row.id])

    def _hold(self, entry_id: int, tpl: Template | Open | None, batch: int,
              keys: set[str] | None = None) -> None:
        if keys is None:
            keys = {entries.target_key(t) for t in tpl.targets} if tpl else set()
        if not any(self.last_change.get(key, -1) > batch for key in keys):
            self.holders.pop(entry_id, None)  # nothing still to come changes its links
            return
        self.holders[entry_id] = _Holder(tpl)
        for key in keys:
            self.by_key.setdefault(key, set()).add(entry_id)

    def _commit(self, number: int, batch: list[Op], rendered_batch: list) -> None:
        batch, rendered_batch = self._drop_failed(batch, rendered_batch)
        templates = [tpl for tpl, _ in rendered_batch]
        texts = {id(op): text for op, (_, text) in zip(batch, rendered_batch, strict=True)}
        with self.db.write() as session:
            if search_index.has_index(session):  # SQLite
                session.execute(sa.text(f"PRAGMA cache_size = -{WRITER_CACHE_KIB}"))
            if number == 0 and len(self.ops) > BATCH:
                search_index.start_loading(session)
            next_id = (session.scalar(sa.select(sa.func.max(Entry.id))) or 0) + 1
            final: dict[int, tuple[Op, Template | None]] = {}
            created: set[int] = set()
            first_before: dict[int, Known | None] = {}
            for op, tpl in zip(batch, templates, strict=True):
                key = id(op.entity)
                if op.before is None:
                    op.entity.id = op.after.id = next_id
                    next_id += 1
                    created.add(key)
                else:
                    self.index.remove(self.live[key])
                op.after.id = op.entity.id
                op.after.order = op.entity.id  # type: ignore[assignment]
                self.live[key] = op.after.copy()
                self.index.add(self.live[key])
                final[key] = (op, tpl)
                first_before.setdefault(key, op.before)
            now = utcnow()
            self.creates_left -= len(created)
            last_id = next_id - 1 + self.creates_left  # the import's last new entry
            # The index holds still until the next batch: a target (half of a batch's
            # links repeat one) is resolved once.
            self.resolve = functools.cache(self.index.resolve)
            rendered = self._rows(session, batch, final, created, now, last_id)
            changed = set().union(*(op.changed_keys for op in batch))
            self._place_again(session, changed, {op.entity.id for op in batch})
            drawn: list[tuple[Path, str]] = []
            for key, (op, tpl) in final.items():
                keys = None if isinstance(tpl, Template) else {
                    entries.target_key(link.target) for link in rendered[key].links}
                self._hold(op.after.id, tpl, number, keys)  # type: ignore[arg-type]
                if not isinstance(tpl, Template):  # its file shows its embeds (embeds.in_files)
                    entry = session.get(Entry, op.after.id)
                    texts[id(op)], files = mirror.file_text(session, entry)
                    drawn += [(Path(path), text) for path, text in files.items()]
        # Committed: its mirror files, written by a thread while the next batch goes in.
        if self.db.notes_dir is not None:
            writes = [(mirror.relpath(op.after), texts[id(op)])  # type: ignore[arg-type]
                      for op, _ in final.values()] + drawn
            removes = {mirror.relpath(old) for old in first_before.values()  # type: ignore[arg-type]
                       if old is not None}
            self.files.append(self.writer.submit(mirror.apply, Path(self.db.notes_dir), writes,
                                                 removes))

    def _drop_failed(self, batch: list[Op], rendered_batch: list) -> tuple[list, list]:
        """A note that could not be rendered is not imported (the report says so)."""
        kept = []
        for op, done in zip(batch, rendered_batch, strict=True):
            if not isinstance(done[0], Failed):
                kept.append((op, done))
                continue
            self.report.errors.append(f"{op.path}: could not be rendered ({done[0].reason})")
            if op.before is None:
                self.report.created -= 1
                self.creates_left -= 1
            else:
                self.report.updated -= 1
        return [op for op, _ in kept], [done for _, done in kept]

    def _rows(self, session, batch, final, created, now, last_id: int) -> dict:
        updated = [op.after.id for key, (op, _) in final.items() if key not in created]
        rendered = {}
        for key, (_op, tpl) in final.items():
            if isinstance(tpl, Template):
                rendered[key] = place_links(self.placeholders, tpl, self.resolve)
        rows = [_entry_row(op, rendered.get(key, ("", "")), now,
                           tpl.tags if isinstance(tpl, Template) else [])
                for key, (op, tpl) in final.items()]
        inserts = [row for row, key in zip(rows, final, strict=True) if key in created]
        insert_many(session, ENTRY, [{**row, "created_at": now} for row in inserts])
        if updated:
            session.execute(_UPDATE, [_by_id(row) for row, key in zip(rows, final, strict=True)
                                      if key not in created])
            for table, column in ((Link, Link.source_id), (EntryTag, EntryTag.entry_id),
                                  (EntryAlias, EntryAlias.entry_id)):
                for chunk in _chunks(updated, 500):
                    session.execute(sa.delete(table).where(column.in_(chunk)))
        # an embed: filled here, as a save's is; twice if it shows a note of this batch
        opened = [(k, op, tpl) for k, (op, tpl) in final.items() if not isinstance(tpl, Template)]
        for key, op, tpl in opened + [o for o in opened if not o[2] or o[2].notes]:
            entry = session.get(Entry, op.after.id)
            done = saving.place_or_render(session, tpl, op.body)
            entry.body_html, entry.toc_html = done.html, done.toc_html
            entry.body_tags = entries.body_tags(op.after.tag_list, _tags(op, done.tags))
            session.flush()
            rendered[key] = done
        insert_many(session, Revision.__table__, [
            {"entry_id": op.after.id, "number": op.after.revision, "date": op.after.date,
             "title": op.after.title, "body_md": op.body, "tags": op.after.tags,
             "status": op.after.status, "publish": op.after.publish, "author": self.author,
             "note": f"imported from {op.path.name}"[:200], "created_at": now}
            for op in batch])
        links, tags, fts = [], [], []
        for key, (op, tpl) in final.items():
            done = tpl if isinstance(tpl, Template) else rendered[key]
            links += [{"source_id": op.after.id, "target_key": entries.target_key(link.target),
                       "text": link.text[:200], "context": link.context[:400]}
                      for link in done.links]
            tags += [{"entry_id": op.after.id, "tag": tag} for tag in _tags(op, done.tags)]
            fts.append({"id": op.after.id, "t": op.after.title, "g": op.after.tags,
                        "b": done.text, "k": search_index.kind_token(op.after.kind)})
        insert_many(session, EntryAlias.__table__, [
            {"entry_id": op.after.id, "key": key} for op, _ in final.values()
            for key in op.after.aliases])
        insert_many(session, Link.__table__, links)
        insert_many(session, EntryTag.__table__, tags)
        search_index.index_rows(session, fts, updated, last_id)
        return rendered

    def _place_again(self, session, changed: set[str], skip: set[int]) -> None:
        """Entries from earlier batches (or from before) linking to what this batch
        changed: their links placed afresh, in this transaction (entries.linkers)."""
        ids = set().union(*(self.by_key.get(key, ()) for key in changed)) - skip
        updates = []
        for entry_id in sorted(ids):
            holder = self.holders.get(entry_id)
            if holder is None:
                continue
            if not isinstance(holder.tpl, Template):
                entry = session.get(Entry, entry_id)
                done = saving.place_or_render(session, holder.tpl, entry.body_md)
                entry.body_html, entry.toc_html = done.html, done.toc_html
                continue
            html, toc = place_links(self.placeholders, holder.tpl, self.resolve)
            if hash((html, toc)) != holder.html_hash:
                holder.html_hash = hash((html, toc))
                updates.append({"_id": entry_id, "body_html": html, "toc_html": toc})
        if updates:
            session.execute(_UPDATE, updates)


def _by_id(row: dict) -> dict:
    row = dict(row)
    row["_id"] = row.pop("id")
    return row


def _result(future) -> list:
    return future if isinstance(future, list) else future.result()


def _chunks(items: list, size: int) -> list[list]:
    return [items[i:i + size] for i in range(0, len(items), size)]


def _tags(op: Op, found: list[str]) -> list[str]:  # entries._store_links_and_tags's
    return list(dict.fromkeys(op.after.tag_list + [t for t in found if entries.TAG_RE.match(t)]))


def _entry_row(op: Op, html: tuple[str, str], now, found: list[str]) -> dict:
    k = op.after
    return {"id": k.id, "kind": k.kind, "date": k.date, "iso_week": k.iso_week,
            "title": k.title, "title_key": entries.link_key(k.title), "slug": k.slug,
            "source_path": k.source, "front_matter": k.extra,
            "name_key": note_paths.name_of(k.path_key) if k.source else None,
            "body_md": op.body, "body_html": html[0], "toc_html": html[1], "tags": k.tags,
            "body_tags": entries.body_tags(k.tag_list, _tags(op, found)),
            "status": k.status, "publish": k.publish, "revision": k.revision, "updated_at": now}
