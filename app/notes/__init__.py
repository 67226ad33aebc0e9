"""The notebook's pages: home, entries, letters, history, search, site map, tags, feed."""

from flask import Blueprint

bp = Blueprint("notes", __name__)

from app.notes import attachments, editing, feed, views  # noqa: E402,F401  (routes register on bp)
