"""/api/v1 for the notebook: parse, call the notebook, answer JSON."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from flask import current_app, jsonify, request

from app.db import get_db, get_reader, get_session
from app.errors import Invalid, NotFound, refuse_unknown
from app.models import Entry, Revision
from app.notebook import (
    addresses,
    attachments,
    browse,
    entries,
    isoweeks,
    letters,
    mirror,
    render,
    saving,
    search,
)
from app.notebook.entry_rows import EntryRow
from app.web.access import (
    author,
    can_write,
    readable_entry,
    visible,
    visible_entry,
    visible_revision,
    visible_revisions,
)
from app.web.api import idempotency
from app.web.api.blueprint import bp
from app.web.api.openapi import document
from app.web.parsing import int_arg, json_body
from app.web.saves import save


def entry_json(entry: Entry | EntryRow, *, full: bool = True) -> dict:
    data = {
        "id": entry.id, "kind": entry.kind, "date": entry.date.isoformat(),
        "week": entry.iso_week, "title": entry.title, "slug": entry.slug,
        "tags": entry.all_tags, "status": entry.status, "revision": entry.revision,
        "url": addresses.entry_url(entry),
        "created_at": entry.created_at.isoformat() + "Z",
        "updated_at": entry.updated_at.isoformat() + "Z",
    }
    if full:
        data["publish"] = entry.publish
        data["body"] = entry.body_md
        data["html"] = entry.body_html if can_write() else render.hide_draft_links(
            entry.body_html)
    return data


def revision_json(rev: Revision, *, full: bool = False) -> dict:
    data = {"number": rev.number, "author": rev.author, "note": rev.note,
            "created_at": rev.created_at.isoformat() + "Z", "title": rev.title,
            "date": rev.date.isoformat(), "tags": rev.tags.split(), "status": rev.status,
            "publish": rev.publish}
    if full:
        data["body"] = rev.body_md
    return data


@bp.get("/openapi.json")
def openapi():
    return jsonify(document())


@bp.get("/entries")
def list_entries():
    """Entries newest first; the same filters as search (q, tag, from, to, kind, week)."""
    limit = int_arg("limit", 50, 1, 500)
    offset = int_arg("offset", 0, 0, 10_000_000)
    parts = [request.args.get("q", "")]
    for name in ("tag", "from", "to", "kind", "week"):
        for value in request.args.getlist(name):
            if " " in value or not value:
                raise Invalid(f"{name} must be a single word", name)
            parts.append(f"{name}:{value}")
    text = " ".join(p for p in parts if p)
    if text:
        results = search.search(get_session(), text, limit=limit, offset=offset,
                                include_drafts=can_write(),
                                seconds=current_app.config["SEARCH_TIME_LIMIT_S"])
        items = [entry_json(hit.entry, full=False) for hit in results.hits]
        has_more = results.has_more
    else:
        query = sa.select(Entry).order_by(Entry.date.desc(), Entry.id.desc())
        if not can_write():
            query = query.where(Entry.status == "published")
        rows = list(get_session().scalars(query.limit(limit + 1).offset(offset)))
        items = [entry_json(e, full=False) for e in rows[:limit]]
        has_more = len(rows) > limit
    return jsonify(entries=items, has_more=has_more, limit=limit, offset=offset)


@bp.post("/entries")
def create_entry():
    """A new entry. With an Idempotency-Key, a repeat of the same request answers 200 with
    the entry the first one made (app/web/api/idempotency.py)."""
    data = json_body()
    refuse_unknown(data, entries.FIELDS)
    key = idempotency.requested_key()
    if key is not None:  # a repeat renders nothing
        with get_db().read() as reader:
            if (made := idempotency.replay(reader, key, data)) is not None:
                return _replayed(made)
    date = data.get("date") or isoweeks.today(current_app.config["TIMEZONE"]).isoformat()
    session, entry, _ = save(lambda reader: saving.prepare_create(
        reader, date=date, title=data.get("title"), body=data.get("body", ""),
        tags=data.get("tags"), status=data.get("status", "published"),
        publish=data.get("publish", False)), author())
    if key is not None:
        idempotency.remember(session, key, data, entry, author())
    try:
        mirror.commit(session)
    except sa.exc.IntegrityError:
        # A copy of this request committed the same key between our look and our write
        # (the save renders before it takes the lock): answer as its replay.
        session.rollback()
        if key is None or (made := idempotency.replay(session, key, data)) is None:
            raise
        return _replayed(made)
    return jsonify(entry_json(entry)), 201, {"Location": addresses.entry_url(entry)}


def _replayed(entry: Entry):
    return jsonify(entry_json(entry)), 200, {"Location": addresses.entry_url(entry),
                                             "Idempotent-Replayed": "true"}


@bp.get("/entries/<int:entry_id>")
def get_entry(entry_id: int):
    return jsonify(entry_json(readable_entry(entry_id)))


@bp.put("/entries/<int:entry_id>")
def update_entry(entry_id: int):
    data = json_body()
    changes = {k: v for k, v in data.items() if k != "base_revision"}
    base = data.get("base_revision")
    session, entry, before = save(lambda reader: saving.prepare_update(
        reader, entry_id, changes, base_revision=base), author())
    mirror.commit(session)
    body = entry_json(entry)
    if base != before:  # saved on top of a change made meanwhile, merged line by line
        body["merged_with"] = before
    return jsonify(body)


@bp.delete("/entries/<int:entry_id>")
def delete_entry(entry_id: int):
    base = request.args.get("base_revision")
    if base is not None:
        base = int_arg("base_revision", 0, 0, 10**9)
    session, _, _ = save(lambda reader: saving.prepare_delete(
        reader, entry_id, base_revision=base), author())
    mirror.commit(session)
    return "", 204


@bp.get("/entries/<int:entry_id>/revisions")
def list_revisions(entry_id: int):
    entry = visible_entry(entry_id)
    revs = visible_revisions(entry)
    return jsonify(entry_id=entry.id, revisions=[revision_json(r) for r in revs])


@bp.get("/entries/<int:entry_id>/revisions/<int:number>")
def get_revision(entry_id: int, number: int):
    entry = visible_entry(entry_id)
    return jsonify(revision_json(visible_revision(entry, number), full=True))


@bp.post("/entries/<int:entry_id>/restore")
def restore_revision(entry_id: int):
    data = json_body()
    number = data.get("revision")
    if isinstance(number, bool) or not isinstance(number, int):
        raise Invalid("revision (an integer) is required", "revision")
    session, entry, _ = save(lambda reader: saving.prepare_restore(
        reader, entry_id, number, base_revision=data.get("base_revision")), author())
    mirror.commit(session)
    return jsonify(entry_json(entry))


@bp.get("/entries/<int:entry_id>/backlinks")
def get_backlinks(entry_id: int):
    """The entries linking here, newest first, a page at a time (a hub has hundreds)."""
    limit = int_arg("limit", 100, 1, 500)
    offset = int_arg("offset", 0, 0, 10_000_000)
    entry = readable_entry(entry_id)
    links, total = browse.backlinks(get_reader(), entry, include_drafts=can_write(),
                                    limit=limit, offset=offset)
    return jsonify(backlinks=[{**entry_json(b.source, full=False), "context": b.context}
                              for b in links],
                   total=total, has_more=offset + len(links) < total, limit=limit,
                   offset=offset)


@bp.post("/entries/<int:entry_id>/attachments")
def upload_attachment(entry_id: int):
    session = get_session()
    entry = entries.get(session, entry_id)
    upload = request.files.get("file")
    if upload is None:
        raise Invalid("send the file as multipart/form-data in a field named 'file'", "file")
    stored = attachments.store(session, Path(current_app.config["DATA_DIR"]), entry,
                               upload.stream, upload.filename or "file")
    session.commit()
    return jsonify(
        url=attachments.url_for_attachment(stored), markdown=attachments.markdown_for(stored),
        content_type=stored.content_type, size=stored.size, sha256=stored.sha256,
    ), 201


@bp.get("/weeks/<week>")
def get_week(week: str):
    """The letter of an ISO week; this week's is created on demand from the template."""
    try:
        isoweeks.parse_week(week)
    except ValueError as exc:
        raise Invalid(str(exc), "week") from None
    timezone = current_app.config["TIMEZONE"]
    session = get_session()
    if week == isoweeks.iso_week(isoweeks.today(timezone)):  # created on demand
        letter = letters.this_weeks_letter(current_app.extensions["db"], session, timezone)[1]
    else:
        letter = letters.letter_row(session, week)
    if letter is None or not visible(letter):
        raise NotFound(f"no letter for {week}")
    items = [e for e in letters.week_entries(session, week) if visible(e)]
    return jsonify(letter=entry_json(letter), entries=[entry_json(e, full=False) for e in items])


@bp.get("/search")
def search_entries():
    limit = int_arg("limit", 20, 1, 100)
    offset = int_arg("offset", 0, 0, 100_000)
    results = search.search(get_session(), request.args.get("q", ""), limit=limit,
                            offset=offset, include_drafts=can_write(),
                            seconds=current_app.config["SEARCH_TIME_LIMIT_S"])
    return jsonify(
        q=request.args.get("q", ""),
        results=[{**entry_json(h.entry, full=False), "snippet": h.snippet_html,
                  "score": h.score} for h in results.hits],
        has_more=results.has_more,
    )


@bp.get("/tags")
def list_tags():
    counts = browse.tag_counts(get_session(), include_drafts=can_write())
    return jsonify(tags=[{"tag": t, "count": n} for t, n in counts])


@bp.get("/letter-template")
def get_template():
    return jsonify(template=letters.letter_template(get_session()))


@bp.put("/letter-template")
def put_template():
    data = json_body()
    text = data.get("template")
    if not isinstance(text, str) or len(text) > letters.MAX_TEMPLATE:
        raise Invalid(f"template must be a string of at most {letters.MAX_TEMPLATE} characters",
                      "template")
    session = get_session()
    letters.set_letter_template(session, text.replace("\r\n", "\n"))
    session.commit()
    return jsonify(template=text)


