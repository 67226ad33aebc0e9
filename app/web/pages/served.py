"""What is fetched rather than read as a page: the Atom feed, uploaded attachments, the
web manifest and icon that put the notebook on a phone's home screen, and the health
check. Each file is served so that it cannot act as a page of the notebook."""

from pathlib import Path

import sqlalchemy as sa
from flask import Response, abort, current_app, g, jsonify, redirect, request, send_file

from app import backups
from app.db import get_session
from app.models import Attachment
from app.notebook import atom
from app.notebook.attachments import IMAGE_TYPES, path_for
from app.web.hardening import INERT_CSP
from app.web.pages.blueprints import notes as bp
from app.web.pages.chrome import asset_url

# The light theme's page and header colours (app/static/app.css --bg and --surface).
BACKGROUND, THEME = "#fbfaf7", "#ffffff"


@bp.get("/feed.atom")
def feed():
    # Read with a feed token, the feed carries it to its images (/runs/<id>/card.svg): a
    # reader fetches them as it fetched the feed (app/web/pages/cards.py).
    identity = getattr(g, "identity", None)
    token = request.args.get("token") if identity and identity.role == "feed" else None
    body = atom.build(get_session(), request.host_url, token=token)
    return Response(body, mimetype="application/atom+xml")


@bp.get("/healthz")
def healthz():
    """Alive, and how old the last backup is (a warning past two days; still 200: the web
    is up, and a health check that restarts it would not make a backup)."""
    return jsonify(status="ok",
                   backup=backups.last_backup(Path(current_app.config["DATA_DIR"]) / "backups"))


@bp.get("/attachments/<sha256>/<name>")
def attachment(sha256: str, name: str):
    if len(sha256) != 64 or not all(c in "0123456789abcdef" for c in sha256):
        abort(404)
    row = get_session().scalar(
        sa.select(Attachment).where(Attachment.sha256 == sha256).limit(1)
    )
    path = path_for(Path(current_app.config["DATA_DIR"]), sha256)
    if row is None or not path.exists():
        abort(404)
    inline = row.content_type in IMAGE_TYPES or row.content_type == "application/pdf"
    response = send_file(path, mimetype=row.content_type, as_attachment=not inline,
                         download_name=row.filename, max_age=31536000, conditional=True)
    # nosniff stops "text/plain" becoming HTML; INERT_CSP stops an SVG running script.
    response.headers["Content-Security-Policy"] = INERT_CSP
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Cache-Control"] = "private, max-age=31536000, immutable"
    return response


@bp.get("/manifest.webmanifest")
def manifest():
    """What a phone needs to add the notebook to its home screen and open it like an app
    (standalone, at Home). Icons are cache-busted like every static file."""
    icon = [{"src": asset_url(f"icon-{n}.png"), "sizes": f"{n}x{n}", "type": "image/png",
             "purpose": "any"} for n in (192, 512)]
    icon.append({"src": asset_url("icon-maskable-512.png"), "sizes": "512x512",
                 "type": "image/png", "purpose": "maskable"})
    body = {
        "name": "Commonplace", "short_name": "Commonplace",
        "description": "A notebook and experiment journal",
        "id": "/", "start_url": "/", "scope": "/", "display": "standalone",
        "background_color": BACKGROUND, "theme_color": THEME, "icons": icon,
        "shortcuts": [{"name": "New entry", "url": "/entries/new"},
                      {"name": "Search", "url": "/search"}],
    }
    response = jsonify(body)
    response.mimetype = "application/manifest+json"
    response.headers["Cache-Control"] = "private, max-age=3600"
    return response


@bp.get("/favicon.ico")
def favicon():
    """Browsers and feed readers ask for /favicon.ico whatever the page says."""
    return redirect(asset_url("icon-32.png"), code=302)
