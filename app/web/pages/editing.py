"""Pages that change entries: new, edit (with the merge view on a stale base), delete,
history with diffs and restore, and the preview the editor fetches."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlencode

from flask import abort, current_app, redirect, render_template, request, url_for

from app.db import get_session
from app.errors import Conflict, Invalid, Refusal
from app.models import Entry, Revision
from app.notebook import addresses, browse, entries, mirror, saving
from app.web.access import author, require_owner, visible_entry, visible_revision, visible_revisions
from app.web.pages.blueprints import notes as bp
from app.web.pages.chrome import today
from app.web.pages.diffing import field_changes, line_diff, stats
from app.web.saves import save


@dataclass
class Draft:
    """What the form holds: the user's text, exactly as typed, for re-showing it."""

    date: str = ""
    title: str = ""
    tags: str = ""
    status: str = "published"
    body: str = ""
    publish: bool = False

    @classmethod
    def from_form(cls) -> Draft:
        form = request.form
        draft = cls(**{name: form.get(name, "") for name in entries.FIELDS if name != "publish"})
        # An unticked checkbox is not sent at all: absent is "not public".
        draft.publish = "publish" in form
        # Browsers send textarea lines ending in CRLF; the stored text uses LF.
        draft.body = draft.body.replace("\r\n", "\n")
        return draft

    @classmethod
    def of(cls, thing: Entry | Revision) -> Draft:
        return cls(thing.date.isoformat(), thing.title, " ".join(thing.tags.split()),
                   thing.status, thing.body_md, thing.publish)

    def changes(self) -> dict:
        return {name: getattr(self, name) for name in entries.FIELDS}

    def short_fields(self) -> dict[str, str]:
        return {"title": self.title, "date": self.date, "tags": self.tags,
                "status": self.status, "publish": "yes" if self.publish else "no"}


def field_errors(exc: Invalid) -> dict[str, str]:
    """What the form shows next to each field: every field's problem where the save
    checked them all at once (entries.checked), else the one it met."""
    return exc.details.get("errors") or {exc.field or "body": exc.message}


def base_revision() -> int:
    raw = request.form.get("base_revision", "")
    if not raw.isdecimal() or len(raw) > 9:
        raise Invalid("base_revision must be the revision number the edit started from",
                      "base_revision")
    return int(raw)


def form_page(draft: Draft, *, entry: Entry | None, errors=None, status: int = 200):
    return render_template("notes/edit.html", draft=draft, entry=entry, errors=errors or {},
                           statuses=entries.STATUSES), status


# -- new and edit -------------------------------------------------------------------------


@bp.get("/entries/new")
def new_entry():
    require_owner()
    date = request.args.get("date", "")
    draft = Draft(date=date or today().isoformat(), title=request.args.get("title", ""))
    errors = {}
    if date:
        try:
            entries.parse_date(date)
        except Invalid as exc:
            errors["date"] = exc.message
    return form_page(draft, entry=None, errors=errors)


@bp.post("/entries/new")
def create_entry():
    draft = Draft.from_form()
    draft.date = draft.date or today().isoformat()  # the home page's capture box sends none
    draft.status = draft.status or "published"
    try:
        session, entry, _ = save(lambda reader: saving.prepare_create(
            reader, date=draft.date, title=draft.title, body=draft.body, tags=draft.tags,
            status=draft.status, publish=draft.publish), author())
    except Invalid as exc:
        return form_page(draft, entry=None, errors=field_errors(exc), status=422)
    mirror.commit(session)
    return redirect(addresses.entry_url(entry), code=303)


@bp.get("/entries/<int:entry_id>/edit")
def edit_entry(entry_id: int):
    require_owner()
    entry = visible_entry(entry_id)
    return form_page(Draft.of(entry), entry=entry)


@bp.post("/entries/<int:entry_id>/edit")
def update_entry(entry_id: int):
    base = base_revision()
    draft = Draft.from_form()
    try:
        session, entry, before = save(lambda reader: saving.prepare_update(
            reader, entry_id, draft.changes(), base_revision=base), author())
    except Conflict as conflict:
        return merge_page(entries.get(get_session(), entry_id), draft, base, conflict)
    except Invalid as exc:
        entry = entries.get(get_session(), entry_id)
        return form_page(draft, entry=entry, errors=field_errors(exc), status=422)
    mirror.commit(session)
    # Saved on top of a change made meanwhile: the page says so, with the diff one click away.
    merged = {"merged": before, "base": base} if base != before else {}
    return redirect(url_for_entry(entry, **merged), code=303)


def url_for_entry(entry: Entry, **args) -> str:
    return addresses.entry_url(entry) + (f"?{urlencode(args)}" if args else "")


def merge_page(entry: Entry, mine: Draft, base: int, conflict: Conflict):
    """Both this save and one made meanwhile changed the same lines: show just those places,
    theirs beside mine, and offer a text that keeps both sides (saved as offered, nothing is
    lost). Changes elsewhere in the text were merged already and are in the offer."""
    session = get_session()
    theirs = browse.revision(session, entry, entry.revision)
    try:
        base_text = browse.revision(session, entry, base).body_md
    except Refusal:  # the base is not a revision of this entry: nothing to diff against
        base_text = None
    places = []
    for hunk in conflict.conflicts:
        if hunk["field"] == "body":
            before = (base_text or "").split("\n")[max(0, hunk["start"] - 2):hunk["start"] - 1]
            rows = line_diff("\n".join(before + hunk["theirs"]),
                             "\n".join(before + hunk["mine"]))
            places.append({"label": f"Line {hunk['start']}", "rows": rows})
        else:
            places.append({"label": hunk["field"].capitalize(), "fields": field_changes(
                {hunk["field"]: _shown(hunk["theirs"])}, {hunk["field"]: _shown(hunk["mine"])})})
    offered = conflict.offered or {}
    offer = Draft(offered.get("date", mine.date), offered.get("title", mine.title),
                  _shown(offered.get("tags", mine.tags)), offered.get("status", mine.status),
                  offered.get("body", mine.body), offered.get("publish", mine.publish))
    return render_template(
        "notes/merge.html", entry=entry, base=base, theirs=theirs, places=places, offer=offer,
        theirs_rows=line_diff(base_text, entry.body_md) if base_text is not None else [],
        statuses=entries.STATUSES,
    ), 409


def _shown(value) -> str:
    return " ".join(value) if isinstance(value, list) else str(value)


# -- delete -------------------------------------------------------------------------------


@bp.get("/entries/<int:entry_id>/delete")
def confirm_delete(entry_id: int):
    require_owner()
    return render_template("notes/delete.html", entry=visible_entry(entry_id), changed=False)


@bp.post("/entries/<int:entry_id>/delete")
def delete_entry(entry_id: int):
    base = base_revision()
    try:
        session, _, _ = save(lambda reader: saving.prepare_delete(
            reader, entry_id, base_revision=base), author())
    except Conflict:
        # It changed since the user looked: ask again about what it is now.
        entry = entries.get(get_session(), entry_id)
        return render_template("notes/delete.html", entry=entry, changed=True), 409
    mirror.commit(session)
    return redirect(url_for("notes.home"), code=303)


# -- history ------------------------------------------------------------------------------


@bp.get("/entries/<int:entry_id>/history")
def history(entry_id: int):
    entry = visible_entry(entry_id)
    revisions = visible_revisions(entry)
    return render_template("notes/history.html", entry=entry, revisions=revisions)


def _revision_arg(name: str) -> int:
    raw = request.args.get(name, "")
    if not raw.isdecimal() or len(raw) > 9:
        abort(400, description=f"{name} must be a revision number")
    return int(raw)


@bp.get("/entries/<int:entry_id>/diff")
def diff(entry_id: int):
    entry = visible_entry(entry_id)
    a, b = _revision_arg("a"), _revision_arg("b")
    if a > b:  # always read a diff forwards in time
        a, b = b, a
    old, new = visible_revision(entry, a), visible_revision(entry, b)
    rows = line_diff(old.body_md, new.body_md)
    fields = field_changes(Draft.of(old).short_fields(), Draft.of(new).short_fields())
    return render_template("notes/diff.html", entry=entry, old=old, new=new, rows=rows,
                           stats=stats(rows), fields=fields)


@bp.post("/entries/<int:entry_id>/restore")
def restore(entry_id: int):
    raw = request.form.get("revision", "")
    if not raw.isdecimal() or len(raw) > 9:
        raise Invalid("revision must be a revision number", "revision")
    base = base_revision()
    session, entry, _ = save(lambda reader: saving.prepare_restore(
        reader, entry_id, int(raw), base_revision=base), author())
    mirror.commit(session)
    return redirect(url_for("notes.history", entry_id=entry.id), code=303)


# -- preview ------------------------------------------------------------------------------


@bp.post("/preview")
def preview():
    """The editor's preview: the body rendered and sanitized exactly as a save would,
    returned as an HTML fragment. Reads only, so it does not hold the write lock; renders
    under the same budget as a save, so a note too slow to save is refused here too."""
    body = entries.check_body(request.form.get("body", ""))
    with current_app.extensions["db"].read() as session:
        rendered = saving.place(session, saving.render(body, "body", session))
    html = rendered.html or '<p class="muted">Nothing to preview yet.</p>'
    return html, 200, {"Content-Type": "text/html; charset=utf-8", "Cache-Control": "no-store"}
