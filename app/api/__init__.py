"""The JSON API under /api/v1: everything the pages show and do, for the CLI and scripts."""

from flask import Blueprint

bp = Blueprint("api", __name__, url_prefix="/api/v1")

from app.api import runs, views  # noqa: E402,F401  (routes register on bp)
