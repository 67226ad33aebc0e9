"""The web layer: the only part of the server that knows about HTTP requests.

    auth/          who is asking (tailnet identity, tokens) and what they may do
    hardening.py   response headers, bounded ids, trusted hosts, where the web may listen
    access.py      drafts and owner-only forms, inside a view
    parsing.py     JSON bodies and integer arguments
    pages/         the HTML pages (blueprints "notes" and "experiments")
    api/           the JSON API under /api/v1 and its OpenAPI document
    runner_api.py  the runner agents' pull API under /api/v1/runner

Views are thin: parse, call the journal or the notebook, render or answer JSON.
"""

from flask import Flask

from app import errors
from app.web import api, auth, hardening, pages, runner_api


def init_app(app: Flask) -> None:
    hardening.init_app(app)  # the id converter must be in place before routes are added
    auth.init_app(app)
    hardening.init_long_polls(app)  # after auth: a long poll is held only by a caller let in
    errors.init_app(app)
    app.register_blueprint(pages.notes)
    app.register_blueprint(pages.experiments)
    app.register_blueprint(api.bp)
    app.register_blueprint(runner_api.bp)
