"""Entries: the rules of saving. Every change goes through here, so every save is a
revision, re-renders and re-indexes the entry in the same transaction, and is mirrored to
a plain markdown file once the transaction commits.

Functions take an open write session and never commit: the caller owns the transaction.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
import unicodedata
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.orm import Session

from app.errors import Conflict, Invalid, NotFound, refuse_unknown
from app.models import Entry, EntryAlias, EntryTag, Link, Revision, link_key, utcnow
from app.notebook import attachments, embeds, inclusions, merge, mirror, note_paths, search_index
from app.notebook.addresses import tag_url
from app.notebook.isoweeks import iso_week
from app.notebook.render import Rendered, render
from app.notebook.resolving import DATE_RE, alias_keys, keys_of, resolve, resolver, target_key

# (where links resolve: resolving.py)
__all__ = ["DATE_RE", "keys_of", "link_key", "resolve", "target_key"]

MAX_TITLE = 200
MAX_BODY = 1_000_000
MAX_TAGS = 30
TAG_RE = re.compile(r"^[a-z][a-z0-9_/-]{0,49}$")
STATUSES = ("draft", "published")
# What a save may change; the API, the edit form and the merge view all take these names.
FIELDS = ("date", "title", "body", "tags", "status", "publish")


# -- validation ---------------------------------------------------------------------------


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


def _checked(changes: dict) -> dict:
    """`changes` validated and in the form `values` gives (to compare with it)."""
    checks = {"date": lambda v: parse_date(v).isoformat(), "title": check_title,
              "body": check_body, "tags": parse_tags, "status": check_status,
              "publish": check_publish}
    return {name: checks[name](value) for name, value in changes.items()}


def _merge_stale(session: Session, entry: Entry, changes: dict,
                 base_revision: int) -> tuple[dict, str]:
    """Changes made on top of an older revision, merged with everything saved since
    (three-way, app/notebook/merge.py). Changes to different lines combine; where both
    sides changed the same lines differently, Conflict carries the hunks and a merge
    that keeps both sides. Returns the merged changes and the revision note."""
    base = session.scalar(sa.select(Revision).where(Revision.entry_id == entry.id,
                                                    Revision.number == base_revision))
    if base is None or base_revision > entry.revision:
        raise stale(entry, base_revision)
    mine = _checked(changes)
    merged, conflicts = merge.merge_fields(values(base), values(entry), mine)
    if conflicts:
        raise stale(entry, base_revision, conflicts=conflicts,
                    offered={**values(entry), **merged})
    theirs = session.scalar(sa.select(Revision.author).where(
        Revision.entry_id == entry.id, Revision.number == entry.revision))
    return merged, f"merged with revision {entry.revision} by {theirs}"


def parse_date(value) -> dt.date:
    if isinstance(value, dt.date):
        return value
    if not isinstance(value, str) or not DATE_RE.match(value):
        raise Invalid("date must be YYYY-MM-DD", "date")
    try:
        day = dt.date.fromisoformat(value)
    except ValueError:
        raise Invalid(f"{value} is not a calendar date", "date") from None
    if not 1900 <= day.year <= 2999:
        raise Invalid("date must be between 1900 and 2999", "date")
    return day


def parse_tags(value) -> list[str]:
    """Tags as a list or a space/comma separated string; '#' prefixes are dropped."""
    if value is None:
        return []
    if isinstance(value, str):
        value = re.split(r"[\s,]+", value)
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise Invalid("tags must be a list of strings", "tags")
    tags: list[str] = []
    for raw in value:
        tag = raw.strip().lstrip("#").lower()
        if not tag:
            continue
        if not TAG_RE.match(tag):
            raise Invalid(
                f"tag {raw!r}: letters, digits, '-', '_' and '/', starting with a letter", "tags"
            )
        if tag not in tags:
            tags.append(tag)
    if len(tags) > MAX_TAGS:
        raise Invalid(f"at most {MAX_TAGS} tags", "tags")
    return tags


def check_title(value) -> str:
    if not isinstance(value, str) or not value.strip():
        raise Invalid("title is required", "title")
    title = " ".join(value.split())
    if len(title) > MAX_TITLE:
        raise Invalid(f"title is longer than {MAX_TITLE} characters", "title")
    return title


def check_body(value) -> str:
    if not isinstance(value, str):
        raise Invalid("body must be a string", "body")
    if len(value) > MAX_BODY:
        raise Invalid(f"body is longer than {MAX_BODY} characters", "body")
    # Trailing blank lines are an editor's accident, not content; dropping them keeps the
    # mirror file and an import of it byte-for-byte the same entry.
    return value.replace("\r\n", "\n").rstrip()


def check_status(value) -> str:
    if value not in STATUSES:
        raise Invalid("status must be 'draft' or 'published'", "status")
    return value


def check_publish(value) -> bool:
    if not isinstance(value, bool):
        raise Invalid("publish must be true or false", "publish")
    return value


def slugify(title: str) -> str:
    text = unicodedata.normalize("NFKD", title).encode("ascii", "ignore").decode()
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:80].strip("-")
    return slug or "entry"


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


def _apply(session: Session, entry: Entry, fields: Fields, author: str, note: str,
           aliases: list[str] | None = None) -> Entry:
    """Save `fields` as the entry's next revision; `aliases` (link keys), when given,
    replace its aliases."""
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
    rendered = _render(session, entry)
    session.add(
        Revision(
            entry_id=entry.id, number=entry.revision, date=entry.date, title=entry.title,
            body_md=entry.body_md, tags=entry.tags, status=entry.status,
            publish=entry.publish, author=author,
            note=note[:200],
        )
    )
    _store_links_and_tags(session, entry, rendered)
    search_index.index_entry(session, entry, rendered.text)
    mirror.queue_write(session, entry, old_path)
    # Links written before this entry existed (or under its old title) render afresh.
    # Links to a draft are marked as such, so publishing or unpublishing re-renders them all.
    new_keys = keys_of(entry, aliases)
    changed_keys = new_keys | old_keys if entry.status != old_status else new_keys ^ old_keys
    _rerender_linkers(session, changed_keys, skip=entry.id)
    # Notes that embed this one (![[Title]]) show its new text.
    _rerender_linkers(session, new_keys - changed_keys, skip=entry.id, embedding=True)
    return entry


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


def rerender(session: Session, entry: Entry) -> None:
    """Render the stored text again because the renderer changed: its HTML, and what the
    render finds in it (links, tags, the searched text) with it. Not a revision."""
    rendered = _render(session, entry)
    _store_links_and_tags(session, entry, rendered)
    search_index.index_entry(session, entry, rendered.text)


def _store_links_and_tags(session: Session, entry: Entry, rendered: Rendered) -> None:
    session.execute(sa.delete(Link).where(Link.source_id == entry.id))
    session.execute(sa.delete(EntryTag).where(EntryTag.entry_id == entry.id))
    for link in rendered.links:
        session.add(
            Link(source_id=entry.id, target_key=target_key(link.target),
                 text=link.text[:200], context=link.context[:400])
        )
    tags = list(dict.fromkeys(entry.tag_list + [t for t in rendered.tags if TAG_RE.match(t)]))
    for tag in tags:
        session.add(EntryTag(entry_id=entry.id, tag=tag))
    entry.body_tags = body_tags(entry.tag_list, tags)


def body_tags(field: list[str], tags: list[str]) -> str:
    """Entry.body_tags: the tags of the text that the field does not hold (as many as fit)."""
    found = " ".join(tag for tag in tags if tag not in field)
    return found if len(found) <= 1000 else found[:1001].rsplit(" ", 1)[0]


def _rerender_linkers(session: Session, keys: set[str], skip: int | None,
                      embedding: bool = False) -> None:
    """Render again the entries that link to any of `keys` (only those with an embed in
    their text, when `embedding`)."""
    if not keys:
        return
    query = sa.select(Entry).where(
        Entry.id.in_(sa.select(Link.source_id).where(Link.target_key.in_(keys))),
        Entry.id != (skip or 0),
    )
    if embedding:
        query = query.where(Entry.body_md.contains("![[", autoescape=True))
    sources = session.scalars(query)
    for source in sources:
        _render(session, source)


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
    return _apply(session, entry, fields, author, note, aliases)


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
        changes, merged_note = _merge_stale(session, entry, changes, base_revision)
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
    return _apply(session, entry, fields, author, note, aliases)


def restore(session: Session, entry: Entry, number: int, *, base_revision, author: str) -> Entry:
    """Bring back an old revision's text as a new revision; nothing in history is lost.
    Unlike an edit, a restore is not merged: "make it read as revision N" asked of a text
    that has moved on is asked again, of the text as it is now."""
    if base_revision != entry.revision:
        if isinstance(base_revision, bool) or not isinstance(base_revision, int):
            raise Invalid("base_revision (an integer) is required", "base_revision")
        raise stale(entry, base_revision)
    old = session.scalar(
        sa.select(Revision).where(Revision.entry_id == entry.id, Revision.number == number)
    )
    if old is None:
        raise NotFound(f"entry {entry.id} has no revision {number}")
    changes = {"title": old.title, "body": old.body_md, "tags": old.tags.split(),
               "status": old.status, "publish": old.publish}
    if entry.kind == "entry":
        changes["date"] = old.date
    return update(session, entry, changes, base_revision=base_revision, author=author,
                  note=f"restored revision {number}")


def delete(session: Session, entry: Entry, *, base_revision=None) -> None:
    if base_revision is not None and base_revision != entry.revision:
        raise stale(entry, base_revision)
    keys = keys_of(entry, alias_keys(session, entry.id))
    search_index.remove_entry(session, entry.id)
    mirror.queue_delete(session, entry)
    session.delete(entry)
    session.flush()
    _rerender_linkers(session, keys, skip=None)
