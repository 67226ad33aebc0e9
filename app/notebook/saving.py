"""A save in two steps, so that no markdown is rendered while the write lock is held:

    prepared = saving.prepare_update(reader, entry_id, changes, base_revision=…)
    entry = saving.commit(session, prepared, author=…)     # session: BEGIN IMMEDIATE
    mirror.commit(session)                                  # the caller's

`prepare_*` reads a snapshot (a read session, no lock), checks the fields once, merges a
save made on an older revision with what was saved since, and renders under the budget
(render/isolated.py) everything the save will store: the body, and the entries whose
links to it change or that embed it. Links, embeds and embedded notes are left as
placeholders (render/template.py): they are filled in under the lock, so a note that
embeds this one shows it as this save leaves it. Attachments (`![[image.png]]`) decide
what the markdown becomes, so they are looked up in the snapshot and handed to the render.

`commit` checks that what the preparation read still holds - the entry's revision, which
entries link to it or embed it at which revisions, the attachments the renders used -
places the links and embeds as the notebook stands now, and writes (entries.apply). If
anything moved it raises Moved before writing a row, and the caller rolls back and
prepares again; `ATTEMPTS` times, then the save is refused (`kept_moving`).
"""

from __future__ import annotations

import datetime as dt
import functools
from dataclasses import dataclass, field

import sqlalchemy as sa
from sqlalchemy.orm import Session

from app.errors import Invalid, NotFound, Refusal, refuse_unknown
from app.models import Entry, EntryAlias, Revision, link_key, utcnow
from app.notebook import attachments, embeds, entries, inclusions, note_paths
from app.notebook.addresses import tag_url
from app.notebook.entries import DATE_RE, FIELDS, Fields
from app.notebook.isoweeks import WEEK_RE, iso_week
from app.notebook.render import Rendered, Resolved
from app.notebook.render.isolated import RenderRefused, budgeted
from app.notebook.render.template import Template, fill
from app.notebook.resolving import keys_for

ATTEMPTS = 3
CHUNK = 500  # keys per IN (...): under every SQLite's limit on bound values


class Moved(Exception):
    """The notebook changed between preparing a save and committing it: prepare again."""


class KeptMoving(Refusal):
    """Every attempt was overtaken by another save (not a conflict of this save's own)."""

    status = 409
    code = "busy"


def kept_moving() -> KeptMoving:
    return KeptMoving(f"the notebook changed {ATTEMPTS} times while this was being saved; "
                      f"nothing was saved: try again")


@dataclass
class Prepared:
    entry_id: int | None  # None: a new entry
    kind: str
    revision: int  # the entry's revision the preparation read (0 for a new one)
    fields: Fields | None  # None: nothing to change
    note: str = ""
    body: Template | None = None
    # entries whose links render anew: id → (revision read, its body's template, or None
    # where it could not be rendered within the budget: it keeps its HTML)
    linkers: dict[int, tuple[int, Template | None]] = field(default_factory=dict)
    keys: set[str] = field(default_factory=set)  # the link keys they were found by
    embedded: set[str] = field(default_factory=set)  # and the keys that embedders use
    deleting: bool = False


# -- preparing (a read session) -------------------------------------------------------------


def prepare_create(reader: Session, *, date, title, body="", tags=None, status="published",
                   publish=False, kind: str = "entry", note: str = "") -> Prepared:
    done = entries.checked({"date": date, "title": title, "body": body, "tags": tags,
                            "status": status, "publish": publish})
    fields = Fields(dt.date.fromisoformat(done["date"]), done["title"], done["body"],
                    done["tags"], done["status"], done["publish"])
    keys = keys_for(kind, fields.title, fields.date, None)
    return Prepared(None, kind, 0, fields, note, render(fields.body, "body", reader),
                    _linkers(reader, keys, keys, skip=None), keys, keys)


def prepare_update(reader: Session, entry_id: int, changes: dict, *, base_revision,
                   note: str = "") -> Prepared:
    """`entries.update`'s rules, read from a snapshot: a stale base merged with what was
    saved since (Conflict where both sides changed the same lines), a letter kept in its
    week, the same text saved twice no revision."""
    entry = entries.get(reader, entry_id)
    if isinstance(base_revision, bool) or not isinstance(base_revision, int):
        raise Invalid("base_revision (an integer) is required", "base_revision")
    refuse_unknown(changes, FIELDS)
    mine = entries.checked(changes)
    entries.check_base(entry, base_revision)
    if base_revision != entry.revision:
        mine, merged_note = entries.merge_stale(reader, entry, mine, base_revision)
        note = f"{note}; {merged_note}" if note else merged_note
    fields = Fields(
        entries.parse_date(mine.get("date", entry.date)),
        entries.check_title(mine.get("title", entry.title)),
        entries.check_body(mine.get("body", entry.body_md)),
        entries.parse_tags(mine["tags"]) if "tags" in mine else entry.tag_list,
        mine.get("status", entry.status),
        mine.get("publish", entry.publish),
    )
    if entry.kind == "week" and iso_week(fields.date) != entry.iso_week:
        raise Invalid("a letter's date must stay within its week", "date")
    if (fields.date, fields.title, fields.body, fields.tags, fields.status,
            fields.publish) == (entry.date, entry.title, entry.body_md, entry.tag_list,
                                entry.status, entry.publish):
        return Prepared(entry.id, entry.kind, entry.revision, None)
    # The keys it answers to after the save: an imported note keeps its file's path and
    # aliases (a save from the editor changes neither).
    aliases = entries.alias_keys(reader, entry.id)
    embedded = keys_for(entry.kind, fields.title, fields.date, entry.source_path, aliases)
    keys = entries.changed_keys(entries.keys_of(entry, aliases), embedded,
                                fields.status != entry.status)
    return Prepared(entry.id, entry.kind, entry.revision, fields, note,
                    render(fields.body, "body", reader),
                    _linkers(reader, keys, embedded, skip=entry.id), keys, embedded)


def prepare_restore(reader: Session, entry_id: int, number: int, *,
                    base_revision) -> Prepared:
    """Bring back an old revision's text as a new revision; nothing in history is lost.
    Unlike an edit, a restore is not merged: "make it read as revision N" asked of a text
    that has moved on is asked again, of the text as it is now."""
    entry = entries.get(reader, entry_id)
    if base_revision != entry.revision:
        if isinstance(base_revision, bool) or not isinstance(base_revision, int):
            raise Invalid("base_revision (an integer) is required", "base_revision")
        entries.check_base(entry, base_revision)
        raise entries.stale(entry, base_revision)
    old = reader.scalar(
        sa.select(Revision).where(Revision.entry_id == entry.id, Revision.number == number))
    if old is None:
        raise NotFound(f"entry {entry.id} has no revision {number}")
    changes = {"title": old.title, "body": old.body_md, "tags": old.tags.split(),
               "status": old.status, "publish": old.publish}
    if entry.kind == "entry":
        changes["date"] = old.date.isoformat()
    return prepare_update(reader, entry_id, changes, base_revision=base_revision,
                          note=f"restored revision {number}")


def prepare_delete(reader: Session, entry_id: int, *, base_revision=None) -> Prepared:
    """A delete (refused as stale if `base_revision` is given and older), with the
    entries that link to it rendered anew: their links go nowhere now."""
    entry = entries.get(reader, entry_id)
    if base_revision is not None and base_revision != entry.revision:
        entries.check_base(entry, base_revision)
        raise entries.stale(entry, base_revision)
    keys = entries.keys_of(entry, entries.alias_keys(reader, entry.id))
    return Prepared(entry.id, entry.kind, entry.revision, None,
                    linkers=_linkers(reader, keys, set(), skip=entry.id), keys=keys,
                    deleting=True)


def render(body: str, field_name: str, reader: Session | None = None) -> Template:
    """The body's template, rendered under the budget; a body that cannot be is refused.
    A body naming attachments renders a second time, handed what the first asked for in
    `reader` (without one, none is found: for what needs no notebook, as task boxes)."""
    files: dict[str, str | None] = {}
    try:
        tpl = budgeted(body, tuple(embeds.EMBEDS), tag_url, files=files)
        if tpl.unknown and reader is not None:
            find = attachments.resolver(reader)
            files = {name: find(name) for name in tpl.unknown}
            tpl = budgeted(body, tuple(embeds.EMBEDS), tag_url, files=files)
    except RenderRefused as exc:
        raise Invalid(str(exc), field_name) from None
    return tpl


def _linkers(reader: Session, keys: set[str], embedded: set[str], skip: int | None
             ) -> dict[int, tuple[int, Template | None]]:
    return prepare_refresh(reader, entries.affected(reader, keys, embedded, skip))


def prepare_refresh(reader: Session, sources: list[Entry]
                    ) -> dict[int, tuple[int, Template | None]]:
    """Entries to render again as they are (their links or embeds show something new):
    id → (revision, template). One that cannot be rendered within the budget gets None
    and keeps its HTML: that is its own text's problem, not the caller's."""
    found: dict[int, tuple[int, Template | None]] = {}
    for source in sources:
        try:
            found[source.id] = (source.revision, render(source.body_md, "body", reader))
        except Invalid:
            found[source.id] = (source.revision, None)
    return found


def commit_refresh(session: Session, refreshes: dict[int, tuple[int, Template | None]],
                   *, found: bool = False) -> None:
    """Store the prepared renders: the HTML, and with `found` what the render finds too
    (links, tags, the searched text: entries.rerender, for a new renderer). An entry saved
    since is skipped: its save rendered it, later than this; so is one whose attachments
    changed meanwhile (it keeps its HTML, as one beyond the budget does)."""
    for entry_id, (revision, tpl) in refreshes.items():
        entry = session.get(Entry, entry_id)
        if entry is None or entry.revision != revision or tpl is None:
            continue
        try:
            done = place(session, tpl)
        except Moved:
            continue
        if found:
            entries.rerender(session, entry, lambda _session, _entry, done=done: done)
        entry.body_html, entry.toc_html = done.html, done.toc_html


# -- committing (the write session) ---------------------------------------------------------


def commit(session: Session, prepared: Prepared, *, author: str) -> Entry:
    """Write the prepared save (or delete), or raise Moved (having written nothing)."""
    if prepared.entry_id is None:
        entry = Entry(kind=prepared.kind, revision=0, created_at=utcnow())
        if prepared.kind == "week":
            entry.iso_week = iso_week(prepared.fields.date)
    else:
        entry = entries.get(session, prepared.entry_id)
        if entry.revision != prepared.revision:
            raise Moved
    if prepared.fields is None and not prepared.deleting:
        return entry
    now = {s.id: s.revision for s in entries.affected(session, prepared.keys,
                                                      prepared.embedded, prepared.entry_id)}
    if now != {i: revision for i, (revision, _) in prepared.linkers.items()}:
        raise Moved
    find = attachments.resolver(session)
    for tpl in [prepared.body, *(tpl for _, tpl in prepared.linkers.values())]:
        if tpl is not None and any(find(name) != url for name, url in tpl.files.items()):
            raise Moved

    def rendered(session: Session, target: Entry) -> Rendered:
        tpl = prepared.body if target is entry else prepared.linkers[target.id][1]
        if tpl is None:  # a linker beyond the budget keeps the HTML it has
            return Rendered(target.body_html, target.toc_html, [], [], "")
        done = place(session, tpl)
        target.body_html, target.toc_html = done.html, done.toc_html
        return done

    if prepared.deleting:
        entries.delete(session, entry, rendered=rendered)
        return entry
    return entries.apply(session, entry, prepared.fields, author, prepared.note, rendered)


def place(session: Session, tpl: Template) -> Rendered:
    """The template filled in: links resolved and embeds (notes among them) rendered
    against the notebook as this session sees it; Moved if an attachment the render was
    handed is not the one this session finds."""
    if tpl.files:
        find = attachments.resolver(session)
        if any(find(name) != url for name, url in tpl.files.items()):
            raise Moved
    bound = {name: functools.partial(embed, session) for name, embed in embeds.EMBEDS.items()}
    return fill(tpl, resolve_many(session, tpl.targets), bound,
                inclusions.note_embedder(session, entries.resolve))


def place_or_render(session: Session, tpl: Template | None, body: str) -> Rendered:
    """`place`, or where what the template was handed moved (or there is none) the body
    rendered here in full (bulk_import.py: its templates come from its workers)."""
    if tpl is not None:
        try:
            return place(session, tpl)
        except Moved:
            pass
    return entries.render_body(session, body)


def resolve_many(session: Session, targets: list[str]) -> dict[str, Resolved]:
    """`entries.resolve` (resolving.py) for many targets at once: the same answers in the
    same order of rules (a week, a date, an imported file's path, a title, an alias; the
    same entry among several), with one query per rule and CHUNK targets."""
    weeks, dates, paths, titles = {}, {}, {}, {}
    for target in targets:
        page = note_paths.page_of(target)
        key = link_key(page)
        if not page:
            continue  # [[#Heading]]: this page, no entry
        if WEEK_RE.match(page.strip().upper()):
            weeks[target] = page.strip().upper()
        elif DATE_RE.match(key):
            try:
                dates[target] = dt.date.fromisoformat(key)
            except ValueError:
                dates[target] = None  # no such day: nothing is dated on it
        else:
            paths[target], titles[target] = note_paths.target_key(page), key
    cols = (Entry.id, Entry.kind, Entry.iso_week, Entry.date, Entry.slug, Entry.status)
    newest = (Entry.date.desc(), Entry.id.desc())  # the same day: the later entry
    found = {}
    found.update(_first(session, cols, Entry.iso_week, weeks, (Entry.id,), Entry.kind == "week"))
    found.update(_first(session, cols, Entry.date, dates, (Entry.kind.desc(), Entry.id)))
    found.update(_by_path(session, cols, paths))
    titles = {t: key for t, key in titles.items() if t not in found}
    found.update(_first(session, cols, Entry.title_key, titles, newest))
    aliased = {t: key for t, key in titles.items() if t not in found}
    found.update(_first(session, cols, EntryAlias.key, aliased, newest,
                        EntryAlias.entry_id == Entry.id))
    return {target: entries.placed(target, found.get(target)) for target in targets}


def _by_path(session: Session, cols, paths: dict[str, str]) -> dict:
    """target → the row of the imported file its path key reaches (note_paths.best)."""
    names = sorted({note_paths.name_of(key) for key in paths.values()})
    rows: dict[str, list] = {}
    for start in range(0, len(names), CHUNK):
        for row in session.execute(sa.select(*cols, Entry.source_path, Entry.name_key)
                                   .where(Entry.name_key.in_(names[start:start + CHUNK]))):
            rows.setdefault(row.name_key, []).append(row)
    found = {}
    for target, key in paths.items():
        named = rows.get(note_paths.name_of(key), [])
        best = note_paths.best(key, ((note_paths.path_key(r.source_path), r.id) for r in named))
        if best is not None:
            found[target] = next(r for r in named if r.id == best)
    return found


def _first(session: Session, cols, column, wanted: dict, order, *where) -> dict:
    """target → the first row (in `order`) whose `column` is the target's value."""
    values = list({v for v in wanted.values() if v is not None})
    first: dict = {}
    for start in range(0, len(values), CHUNK):
        query = (sa.select(*cols, column.label("matched"))
                 .where(column.in_(values[start:start + CHUNK]), *where).order_by(*order))
        for row in session.execute(query):
            first.setdefault(row.matched, row)
    return {target: first[v] for target, v in wanted.items() if v in first}
