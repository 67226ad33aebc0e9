"""What the notebook needs to be read and written without the tailnet: the service worker
(app/static/sw.js), served at the origin's root so that its scope is every page; the page
it shows for a page it has not kept; and the list of pages it keeps for reading offline
(this week's letter and the ones before it, the recent entries, the site map)."""

from __future__ import annotations

import datetime as dt
import functools
import json
from pathlib import Path

from flask import Response, current_app, g, jsonify, render_template

from app.db import get_session
from app.notebook import addresses, browse
from app.web.access import can_write
from app.web.pages.blueprints import notes as bp
from app.web.pages.chrome import asset_url, current_week, page_url, today

LETTERS = 5  # this week's and the four before it
RECENT_DAYS = 30
RECENT_MOST = 60  # however busy the month, the copy on a phone stays small


# The worker's second half, named in sw.js by its plain path and served under its
# content-hashed URL: a change to it is a change to the worker's bytes, so browsers update.
WRITES = '"/static/offline-writes.js"'


@bp.get("/sw.js")
def service_worker():
    """A worker controls the pages under the path it is served from: at /sw.js, all of
    them. no-cache, so the browser's update check always reaches the server."""
    body = worker_source(current_app.static_folder or "", asset_url("offline-writes.js"))
    return Response(body, mimetype="text/javascript", headers={"Cache-Control": "no-cache"})


@functools.cache
def worker_source(static_folder: str, writes_url: str) -> str:
    """sw.js with its second half's hashed URL, read once: browsers ask for /sw.js on
    their navigations, and the static files do not change while the process runs."""
    source = (Path(static_folder) / "sw.js").read_text(encoding="utf-8")
    return source.replace(WRITES, json.dumps(writes_url))


@bp.get("/offline")
def offline_page():
    """Shown by the worker for a page it has not kept; offline-page.js lists what it has."""
    return render_template("notes/offline.html")


def offline_paths(session, writer: bool) -> list[str]:
    """The pages a device keeps for reading, and for an owner the forms to write with."""
    letters = browse.recent(session, LETTERS, kind="week", include_drafts=writer)
    since = today() - dt.timedelta(days=RECENT_DAYS)
    recent = [e for e in browse.recent(session, RECENT_MOST, include_drafts=writer)
              if e.date >= since]
    paths = [page_url("notes.home"), addresses.week_url(current_week()),
             page_url("notes.sitemap"), page_url("notes.offline_page")]
    paths += [addresses.entry_url(e) for e in letters + recent]
    if writer:  # the forms a capture and an edit are written in
        paths.append(page_url("notes.new_entry"))
        paths += [addresses.action_url(e, "edit") for e in letters[:1] + recent]
    return list(dict.fromkeys(paths))


@bp.get("/offline/pages.json")
def offline_pages():
    """The offline set, and whose it is: a device keeps one login's copy at a time."""
    body = {"login": g.identity.login, "can_write": can_write(),
            "pages": offline_paths(get_session(), can_write())}
    return jsonify(body), 200, {"Cache-Control": "no-store"}
