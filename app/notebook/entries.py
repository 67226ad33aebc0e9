"""Entries: the rules of saving. Every change goes through here, so every save is a
revision, re-renders and re-indexes the entry in the same transaction, and queues its
plain markdown file, which the caller writes once the transaction commits
(`mirror.commit`).

Functions take an open write session and never commit: the caller owns the transaction.
A save from the web renders before it takes the write lock (saving.py, which uses the
rules here); `create` and `update` render inside it, for callers that work in batches of
their own (a letter made from its template, an import, a task box's tick).
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Callable
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.orm import Session

from app.db import insert_many
from app.errors import Conflict, Invalid, NotFound, refuse_unknown
from app.models import (  # noqa: F401  (link_key: callers read it as entries.link_key)
    Entry,
    EntryAlias,
    EntryTag,
    Link,
    Revision,
    link_key,
    utcnow,
)
from app.notebook import attachments, embeds, inclusions, merge, mirror, note_paths, search_index
from app.notebook.addresses import tag_url
from app.notebook.field_rules import (  # noqa: F401  (callers read them as entries.X)
    DATE_RE,
    MAX_BODY,
    MAX_TAGS,
    MAX_TITLE,
    STATUSES,
    TAG_RE,
    check_body,
    check_publish,
    check_status,
    check_title,
    parse_date,
    parse_tags,
    slugify,
)
from app.notebook.isoweeks import iso_week
from app.notebook.render import Rendered, render
from app.notebook.resolving import (  # noqa: F401  (where links resolve: resolving.py)
    alias_keys,
    keys_of,
    placed,
    resolve,
    resolver,
    target_key,
)

# What a save may change; the API, the edit form and the merge view all take these names.
FIELDS = ("date", "title", "body", "tags", "status", "publish")


# -- validation ---------------------------------------------------------------------------


def check_base(entry: Entry, base_revision: int) -> None:
    """Invalid for a base the entry never had: ahead of it (a client's mistake, not an edit
    that crossed another) or below zero. A base behind the current one is stale (Conflict,
    or a merge), never Invalid."""
    if not 0 <= base_revision <= entry.revision:
        raise Invalid(f"base_revision {base_revision} is not a revision of entry {entry.id} "
                      f"(it is at revision {entry.revision})", "base_revision")


def stale(entry: Entry, base_revision: int, **merge) -> Conflict:
    """The refusal of a save based on an older revision, with the entry as it is now."""
    return Conflict(
        f"entry {entry.id} is at revision {entry.revision}; "
        f"this edit was based on revision {base_revision}",
        current={"id": entry.id, "revision": entry.revision, "kind": entry.kind,
                 **values(entry)},
        **merge,
    )


def values(thing: Entry | Revision) -> dict:
    """An entry's or a revision's fields as a save names them (JSON-ready)."""
    return {"date": thing.date.isoformat(), "title": thing.title, "body": thing.body_md,
            "tags": thing.tags.split(), "status": thing.status, "publish": thing.publish}


def checked(changes: dict) -> dict:
    """`changes` validated and in the form `values` gives (to compare with it). Every
    field's problem at once: Invalid names the first, and its `errors` (field → message)
    all of them, so a form can show each next to its field."""
    checks = {"date": lambda v: parse_date(v).isoformat(), "title": check_title,
              "body": check_body, "tags": parse_tags, "status": check_status,
              "publish": check_publish}
    done, errors = {}, {}
    for name, value in changes.items():
        try:
            done[name] = checks[name](value)
        except Invalid as exc:
            errors[name] = exc.message
    if errors:
        first = next(iter(errors))
        raise Invalid(errors[first], first, errors=errors)
    return done


def merge_stale(session: Session, entry: Entry, mine: dict,
                base_revision: int) -> tuple[dict, str]:
    """Changes made on top of an older revision, merged with everything saved since
    (three-way, app/notebook/merge.py). Changes to different lines combine; where both
    sides changed the same lines differently, Conflict carries the hunks and a merge
    that keeps both sides. `mine` is checked (`checked`). Returns the merged changes and
    the revision note."""
    base = session.scalar(sa.select(Revision).where(Revision.entry_id == entry.id,
                                                    Revision.number == base_revision))
    check_base(entry, base_revision)
    if base is None:
        raise stale(entry, base_revision)
    merged, conflicts = merge.merge_fields(values(base), values(entry), mine)
    if conflicts:
        raise stale(entry, base_revision, conflicts=conflicts,
                    offered={**values(entry), **merged})
    theirs = session.scalar(sa.select(Revision.author).where(
        Revision.entry_id == entry.id, Revision.number == entry.revision))
    return merged, f"merged with revision {entry.revision} by {theirs}"


# -- lookups ------------------------------------------------------------------------------


def get(session: Session, entry_id: int) -> Entry:
    entry = session.get(Entry, entry_id)
    if entry is None:
        raise NotFound(f"no entry {entry_id}")
    return entry


# -- saving -------------------------------------------------------------------------------


@dataclass
class Fields:
    date: dt.date
    title: str
    body: str
    tags: list[str]
    status: str
    publish: bool = False


def _unique_slug(session: Session, entry: Entry, base: str) -> str:
    """Slugs are unique per date, so the mirror's <date>-<slug>.md names one entry."""
    slug, n = base, 1
    while session.scalar(
        sa.select(Entry.id).where(
            Entry.date == entry.date, Entry.slug == slug, Entry.kind == "entry",
            Entry.id != (entry.id or 0),
        )
    ):
        n += 1
        slug = f"{base}-{n}"
    return slug


Renderer = Callable[[Session, Entry], Rendered]  # an entry's stored HTML, set; what it found


def apply(session: Session, entry: Entry, fields: Fields, author: str, note: str,
          rendered: Renderer | None = None, aliases: list[str] | None = None) -> Entry:
    """Write a save: the fields, a revision, links, tags, the index, the mirror file
    (queued) and the entries whose links to it change. `rendered` sets the entry's HTML
    (and that of each entry linking to it); by default they are rendered here. `aliases`
    (link keys), when given, replace the entry's (an import's); else they stay, as its
    source_path does."""
    rendered = rendered or _render
    old_aliases = alias_keys(session, entry.id)
    old_keys = keys_of(entry, old_aliases) if entry.id else set()
    old_status = entry.status
    old_path = mirror.relpath(entry) if entry.id else None
    entry.date = fields.date
    entry.iso_week = iso_week(fields.date)
    entry.title = fields.title
    entry.body_md = fields.body
    entry.tags = " ".join(fields.tags)
    entry.status = fields.status
    entry.publish = fields.publish
    entry.revision += 1
    entry.updated_at = utcnow()
    if entry.kind == "entry":
        entry.slug = _unique_slug(session, entry, slugify(fields.title))
    else:
        entry.slug = entry.iso_week.lower()
    session.add(entry)
    session.flush()  # an id for the links, tags and index rows below
    if aliases is not None and aliases != old_aliases:
        session.execute(sa.delete(EntryAlias).where(EntryAlias.entry_id == entry.id))
        session.add_all(EntryAlias(entry_id=entry.id, key=key) for key in aliases)
        session.flush()
    else:
        aliases = old_aliases
    found = rendered(session, entry)
    session.add(
        Revision(
            entry_id=entry.id, number=entry.revision, date=entry.date, title=entry.title,
            body_md=entry.body_md, tags=entry.tags, status=entry.status,
            publish=entry.publish, author=author,
            note=note[:200],
        )
    )
    _store_links_and_tags(session, entry, found)
    search_index.index_entry(session, entry, found.text)
    mirror.queue_write(session, entry, old_path)
    # Links written before this entry existed (or under its old title) render afresh.
    # Links to a draft are marked as such, so publishing or unpublishing re-renders them all.
    # Notes that embed this one (![[Title]]) show its new text.
    new_keys = keys_of(entry, aliases)
    status_changed = entry.status != old_status
    for source in affected(session, changed_keys(old_keys, new_keys, status_changed),
                           new_keys, skip=entry.id):
        rendered(session, source)
    return entry


def changed_keys(old: set[str], new: set[str], status_changed: bool) -> set[str]:
    """The link keys whose links render differently after a save."""
    return new | old if status_changed else new ^ old


def render_body(session: Session, body: str) -> Rendered:
    """Markdown → sanitized HTML with links resolved against the notebook (also the
    editor's preview, so a preview shows exactly what a save would store)."""
    bound = {name: functools.partial(embed, session) for name, embed in embeds.EMBEDS.items()}
    return render(body, resolve_link=resolver(session), tag_url=tag_url, embeds=bound,
                  resolve_attachment=attachments.resolver(session),
                  embed_note=inclusions.note_embedder(session, resolve))


def _render(session: Session, entry: Entry) -> Rendered:
    rendered = render_body(session, entry.body_md)
    entry.body_html = rendered.html
    entry.toc_html = rendered.toc_html
    return rendered


def refresh_html(session: Session, entry: Entry) -> None:
    """Render the stored text again (an embed's data changed); the text and its history
    stay as they are, so this is not a revision."""
    _render(session, entry)


def rerender(session: Session, entry: Entry, rendered: Renderer | None = None) -> None:
    """Render the stored text again because the renderer changed: its HTML, and what the
    render finds in it (links, tags, the searched text) with it. Not a revision.
    `rendered` sets the HTML, as in `apply`."""
    rendered = (rendered or _render)(session, entry)
    _store_links_and_tags(session, entry, rendered)
    search_index.index_entry(session, entry, rendered.text)


def _store_links_and_tags(session: Session, entry: Entry, rendered: Rendered) -> None:
    session.execute(sa.delete(Link).where(Link.source_id == entry.id))
    session.execute(sa.delete(EntryTag).where(EntryTag.entry_id == entry.id))
    # In one executemany each, not as ORM objects: a note may hold thousands of links,
    # and this runs under the write lock.
    insert_many(session, Link.__table__, [
        {"source_id": entry.id, "target_key": target_key(link.target),
         "text": link.text[:200], "context": link.context[:400]} for link in rendered.links])
    tags = list(dict.fromkeys(entry.tag_list + [t for t in rendered.tags if TAG_RE.match(t)]))
    insert_many(session, EntryTag.__table__, [{"entry_id": entry.id, "tag": tag}
                                              for tag in tags])
    entry.body_tags = body_tags(entry.tag_list, tags)


def body_tags(field: list[str], tags: list[str]) -> str:
    """Entry.body_tags: the tags of the text that the field does not hold (as many as fit)."""
    found = " ".join(tag for tag in tags if tag not in field)
    return found if len(found) <= 1000 else found[:1001].rsplit(" ", 1)[0]


def linkers(session: Session, keys: set[str], skip: int | None,
            embedding: bool = False) -> list[Entry]:
    """The entries with a link to any of `keys` (but `skip`), by id; only those with an
    embed in their text, when `embedding`."""
    if not keys:
        return []
    query = sa.select(Entry).where(
        Entry.id.in_(sa.select(Link.source_id).where(Link.target_key.in_(keys))),
        Entry.id != (skip or 0),
    )
    if embedding:
        query = query.where(Entry.body_md.contains("![[", autoescape=True))
    return list(session.scalars(query.order_by(Entry.id)))


def affected(session: Session, changed: set[str], embedded: set[str],
             skip: int | None) -> list[Entry]:
    """The entries a save renders again, by id: those whose links to it render differently
    (`changed` keys), and those that embed it (`embedded`: its keys now), whose embed shows
    its new text."""
    found = {source.id: source for source in linkers(session, changed, skip)}
    for source in linkers(session, embedded - changed, skip, embedding=True):
        found.setdefault(source.id, source)
    return [found[i] for i in sorted(found)]


def create(
    session: Session, *, author: str, date, title, body="", tags=None, status="published",
    publish=False, kind: str = "entry", note: str = "", source_path: str | None = None,
    aliases: list[str] | None = None,
) -> Entry:
    """A new entry; `source_path` is the file an import made it from (its identity for
    the next import of that folder), `aliases` that file's other names (link keys)."""
    fields = Fields(parse_date(date), check_title(title), check_body(body), parse_tags(tags),
                    check_status(status), check_publish(publish))
    entry = Entry(kind=kind, revision=0, created_at=utcnow(), source_path=source_path,
                  name_key=note_paths.name_of(note_paths.path_key(source_path))
                  if source_path else None)
    if kind == "week":
        entry.iso_week = iso_week(fields.date)
    return apply(session, entry, fields, author, note, aliases=aliases)


def update(session: Session, entry: Entry, changes: dict, *, base_revision, author: str,
           note: str = "", aliases: list[str] | None = None) -> Entry:
    """Apply `changes` (any of FIELDS) made on top of
    `base_revision`. If the entry has moved on since, the changes are merged with what was
    saved meanwhile; only changes that overlap raise Conflict (the caller shows the merge
    page or answers 409), and nothing is ever overwritten."""
    if isinstance(base_revision, bool) or not isinstance(base_revision, int):
        raise Invalid("base_revision (an integer) is required", "base_revision")
    refuse_unknown(changes, FIELDS)
    if base_revision != entry.revision:
        changes, merged_note = merge_stale(session, entry, checked(changes), base_revision)
        note = f"{note}; {merged_note}" if note else merged_note
    fields = Fields(
        parse_date(changes.get("date", entry.date)),
        check_title(changes.get("title", entry.title)),
        check_body(changes.get("body", entry.body_md)),
        parse_tags(changes["tags"]) if "tags" in changes else entry.tag_list,
        check_status(changes.get("status", entry.status)),
        check_publish(changes.get("publish", entry.publish)),
    )
    if entry.kind == "week" and iso_week(fields.date) != entry.iso_week:
        raise Invalid("a letter's date must stay within its week", "date")
    unchanged = (
        fields.date == entry.date and fields.title == entry.title
        and fields.body == entry.body_md and fields.tags == entry.tag_list
        and fields.status == entry.status and fields.publish == entry.publish
    )
    if unchanged and (aliases is None or aliases == alias_keys(session, entry.id)):
        return entry  # saving the same text twice makes no empty revision
    return apply(session, entry, fields, author, note, aliases=aliases)


def delete(session: Session, entry: Entry, *, base_revision=None,
           rendered: Renderer | None = None) -> None:
    """Delete the entry; the entries linking to it render anew (`rendered`, as in apply)."""
    if base_revision is not None and base_revision != entry.revision:
        raise stale(entry, base_revision)
    keys = keys_of(entry, alias_keys(session, entry.id))
    search_index.remove_entry(session, entry.id)
    mirror.queue_delete(session, entry)
    session.delete(entry)
    session.flush()
    for source in linkers(session, keys, skip=None):
        (rendered or _render)(session, source)
