"""Ticking a task box on a rendered page (an entry, a letter, the letter on Home).

Each box is a submit button of a small form holding the revision the page shows, so it
works without script; app.js turns the click into a fetch. The server ticks box n of that
revision's text (app/notebook/tasks.py) and saves it as an ordinary revision made from it,
so a tick on a page that went stale merges like any other edit, and overlapping edits get
the same merge page the editor shows.
"""

from __future__ import annotations

import re

from flask import jsonify, redirect, request
from markupsafe import Markup

from app.db import get_db, get_session
from app.errors import Conflict, Invalid, NotFound
from app.models import Entry
from app.notebook import addresses, browse, entries, mirror, render, saving, tasks
from app.web.access import author, can_write
from app.web.pages.blueprints import notes as bp
from app.web.pages.editing import Draft, base_revision, merge_page
from app.web.saves import save

# Only the pipeline writes data-task (the sanitizer drops it from user HTML), so every
# match is a box the render numbered.
TASK_INPUT_RE = re.compile(r'<input\b[^>]*\sdata-task="(\d+)"[^>]*>')


def form_id(entry: Entry) -> str:
    return f"ticks-{entry.id}"


def tick_url(entry: Entry, n: int | str) -> str:
    """Where box n of the entry is ticked (tick_task), as url_for builds it: by hand, as
    addresses.entry_url is, since a notebook's every entry has its own."""
    return f"{request.script_root}/entries/{entry.id}/tasks/{n}"


@bp.app_template_global("task_boxes")
def task_boxes(entry: Entry) -> Markup:
    """The entry's stored HTML; for an owner, its task boxes become buttons of the entry's
    tick form (templates/notes/_macros.html `tick_form`). O(page), no rendering."""
    html = entry.body_html
    if not can_write():
        return Markup(render.hide_draft_links(html))  # sanitized when it was saved
    if 'data-task="' not in html:
        return Markup(html)
    boxes = tick_url(entry, "")  # the request looked up once, not once a box

    def button(m: re.Match[str]) -> str:
        n = int(m[1])
        done = ' checked=""' in m[0]
        return (f'<button type="submit" form="{form_id(entry)}" id="task-{entry.id}-{n}" '
                f'formaction="{boxes}{n}" name="done" '
                f'value="{0 if done else 1}" class="task-box" role="checkbox" '
                f'aria-checked="{"true" if done else "false"}" aria-label="Task {n + 1}">'
                f"</button>")

    return Markup(TASK_INPUT_RE.sub(button, html))


bp.add_app_template_global(form_id, "tick_form_id")
bp.add_app_template_global(tick_url, "tick_url")


def wants_json() -> bool:
    best = request.accept_mimetypes.best_match(["application/json", "text/html"])
    return best == "application/json"


@bp.post("/entries/<int:entry_id>/tasks/<int:index>")
def tick_task(entry_id: int, index: int):
    base = base_revision()
    done = request.form.get("done", "")
    if done not in ("0", "1"):
        raise Invalid("done is 1 (tick the box) or 0 (untick it)", "done")
    with get_db().read() as reader:  # the tick is worked out outside the write lock
        entry = entries.get(reader, entry_id)
        try:
            shown = browse.revision(reader, entry, base)
        except NotFound:
            raise Invalid(f"base_revision {base} is not a revision of this entry",
                          "base_revision") from None
        body = tasks.tick(shown.body_md, index, done == "1")
    try:
        session, entry, before = save(lambda reader: saving.prepare_update(
            reader, entry_id, {"body": body}, base_revision=base), author())
    except Conflict as conflict:
        mine = Draft.of(shown)
        mine.body = body
        return merge_page(entries.get(get_session(), entry_id), mine, base, conflict)
    mirror.commit(session)
    if wants_json():
        return jsonify(entry_id=entry.id, task=index, done=done == "1",
                       revision=entry.revision, merged=base != before)
    return redirect(f"{back_to(entry)}#task-{entry.id}-{index}", code=303)


def back_to(entry: Entry) -> str:
    """Where the tick came from: the entry's page, or Home (which shows the letter).
    Nothing else, so the form cannot be made to redirect off the notebook."""
    asked = request.form.get("next", "")
    return asked if asked == "/" else addresses.entry_url(entry)
