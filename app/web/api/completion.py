"""/api/v1/complete: what the editor offers after `[[` (titles, weeks, dates; a note's
headings after `[[Title#`), `![[` (files, then the same) and `#` (tags). Read-only and
bounded; drafts are offered only to those who may see them."""

from __future__ import annotations

from flask import current_app, jsonify, request

from app.db import get_session
from app.errors import Invalid
from app.notebook import isoweeks, suggest
from app.web.access import can_write
from app.web.api.blueprint import bp
from app.web.parsing import int_arg

KINDS = ("link", "embed", "tag")


@bp.get("/complete")
def complete():
    kind = request.args.get("kind", "")
    if kind not in KINDS:
        raise Invalid("kind is 'link' (after [[), 'embed' (after ![[) or 'tag' (after #)",
                      "kind")
    prefix = request.args.get("prefix", "")
    if len(prefix) > suggest.MAX_PREFIX:
        raise Invalid(f"prefix is longer than {suggest.MAX_PREFIX} characters", "prefix")
    limit = int_arg("limit", 10, 1, suggest.MAX_LIMIT)
    session = get_session()
    if kind in ("link", "embed"):
        today = isoweeks.today(current_app.config["TIMEZONE"])
        offer = suggest.links if kind == "link" else suggest.embeds
        items = offer(session, prefix, today=today, limit=limit, include_drafts=can_write())
    else:
        items = suggest.tags(session, prefix, limit=limit, include_drafts=can_write())
    response = jsonify(kind=kind, prefix=prefix, items=[
        {"insert": s.insert, "label": s.label, "detail": s.detail, "kind": s.kind}
        for s in items])
    response.headers["Cache-Control"] = "private, no-store"
    return response
