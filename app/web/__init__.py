"""The web layer: the only part of the server that knows about HTTP requests.

    auth/          who is asking (tailnet identity, tokens) and what they may do
    hardening.py   response headers, bounded ids, trusted hosts, where the web may listen
    access.py      drafts and owner-only forms, inside a view
    parsing.py     JSON bodies and integer arguments
    pages/         the HTML pages (blueprints "notes" and "experiments")
    api/           the JSON API under /api/v1 and its OpenAPI document
    runner_api.py  the runner agents' pull API under /api/v1/runner
    resting.py     a worker at rest closes its idle connections and trims its heap
    compression.py text answers compressed (brotli, gzip) and tagged for conditional GETs
    assets.py      static files at content-hashed addresses, precompressed, kept a year

Views are thin: parse, call the journal or the notebook, render or answer JSON.
"""

from flask import Flask
from flask.templating import Environment

from app import errors
from app.web import api, assets, auth, compression, hardening, pages, resting, runner_api


class PageEnvironment(Environment):
    """Flask's Jinja environment, with each template's globals a plain dict. Jinja's own is
    a ChainMap over the environment's globals, which every render copies twice, key by key
    in Python (the context's parent and its set of global names): a tenth of the entry
    page's calls (docs/PERFORMANCE.md, *Rendering a page*). The copy is taken when a
    template is first loaded, and every global is registered before that, in create_app
    (Jinja's docs: "avoid modifying any globals after a template is loaded")."""

    def make_globals(self, d: dict | None) -> dict:
        return {**self.globals, **(d or {})}


class WebApp(Flask):
    """Flask with two answers kept that it would otherwise work out on every request."""

    jinja_environment = PageEnvironment

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._synced: dict = {}

    def ensure_sync(self, func):
        """Flask asks this of every hook and the view on each request, and its answer
        (inspect's checks for a coroutine function) never changes for a function."""
        try:
            return self._synced[func]
        except KeyError:
            if len(self._synced) >= 1024:  # after_this_request's callables are one-offs
                self._synced.clear()
            synced = self._synced[func] = super().ensure_sync(func)
            return synced
        except TypeError:  # an unhashable callable
            return super().ensure_sync(func)


def init_app(app: Flask) -> None:
    hardening.init_app(app)  # the id converter must be in place before routes are added
    auth.init_app(app)
    hardening.init_long_polls(app)  # after auth: a long poll is held only by a caller let in
    errors.init_app(app)
    app.register_blueprint(pages.notes)
    app.register_blueprint(pages.experiments)
    app.register_blueprint(api.bp)
    app.register_blueprint(runner_api.bp)
    resting.init_app(app)
    compression.init_app(app)
    assets.init_app(app)
