"""Serving attachments so that none of them can act as a page of the notebook."""

from pathlib import Path

import sqlalchemy as sa
from flask import abort, current_app, send_file

from app.attachments import IMAGE_TYPES, path_for
from app.auth import INERT_CSP
from app.db import get_session
from app.models import Attachment
from app.notes import bp


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
