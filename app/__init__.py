"""Commonplace: a personal notebook and experiment journal. `create_app` builds the web app.

The server side, in one-way layers (each imports only those below it; import-linter
checks this in the test suite, see pyproject.toml):

    app/web/       HTTP: pages, the JSON API, the runner API, auth
    app/journal/   runs, schedules, result cards, the scheduler process
    app/notebook/  entries, letters, search, browsing, files, markdown rendering
    app/db.py, app/models/, app/errors.py, app/config.py

docs/ARCHITECTURE.md walks a save and a run through these files.
"""

from __future__ import annotations

import gc
import importlib
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from flask import Flask

ROOT = Path(__file__).resolve().parent.parent


def create_app(config: dict | None = None) -> Flask:
    # Imported here, not at the top: the layers below import `app.*` modules, and the
    # package's __init__ must not pull the whole web layer (and Flask) into each of them:
    # the scheduler and `commonplace` commands load only what their process needs.
    from app import db
    from app.config import from_environment
    from app.web import WebApp
    from app.web import init_app as init_web

    app = WebApp(__name__, template_folder=str(ROOT / "templates"))
    app.config.update(from_environment())
    app.config.update(config or {})
    keep_private(Path(app.config["DATA_DIR"]), app.config["DATABASE_URL"])

    db.init_app(app)
    init_web(app)
    register_embeds(app.config["TIMEZONE"])
    for module in EMBED_VIEWS:  # the web renders them: loaded before gunicorn forks
        importlib.import_module(f"app.journal.views.{module}")
    return app


def create_served_app() -> Flask:
    """create_app() for gunicorn, which makes the app once, in its master, and forks the
    workers from it (preload_app in gunicorn.conf.py). What is made by then is frozen out of
    the garbage collector's way, as Python's documentation of gc.freeze advises before a
    fork: a worker's collections would otherwise write to every object they visit, and so
    copy every page it shares with the master (docs/PERFORMANCE.md, *A small host*)."""
    from app.web.auth import warn_of_open_doors
    from app.web.resting import malloc_trim

    app = create_app()
    warn_of_open_doors(app.config)
    gc.collect()  # what is garbage now is not kept for good
    gc.freeze()
    # The heap's free pages (the imports' garbage; megabytes where modules were compiled
    # from source at start) go back to the system here, rather than into every worker.
    malloc_trim()
    return app


class Backend:
    """The app without the web, for a process that serves no page (the scheduler): the
    settings and the database, where the code that takes an app reads them (`config`,
    `extensions["db"]`). Flask is not imported."""

    def __init__(self, config: dict):
        self.config = config
        self.extensions: dict = {}


def create_backend(config: dict | None = None) -> Backend:
    from app import db
    from app.config import from_environment

    backend = Backend({**from_environment(), **(config or {})})
    keep_private(Path(backend.config["DATA_DIR"]), backend.config["DATABASE_URL"])
    backend.extensions["db"] = db.from_config(backend.config)
    register_embeds(backend.config["TIMEZONE"])
    return backend


EMBED_VIEWS = ("cards", "card_markdown", "week_changes")


def register_embeds(timezone: str) -> None:
    from app.notebook import embeds

    # The notebook renders ```run blocks without importing the journal: the embed is
    # registered from above (with the owner's clock for the card's time). Each view is
    # imported at its first render: the scheduler makes this backend too, and renders only
    # when a card reaches a letter (the web imports the views with its pages anyway).
    def view(module: str, name: str):
        def render(*args, **kwargs):
            function = getattr(importlib.import_module(f"app.journal.views.{module}"), name)
            return function(*args, timezone=timezone, **kwargs)
        return render

    embeds.register("run", view("cards", "run_card"))
    # and the card as markdown, for the letter's file on disk (the mirror, an export)
    embeds.register_markdown("run", view("card_markdown", "run_markdown"))
    # its block id in files, which other files of an export link to
    embeds.register_anchor("run", lambda source: importlib.import_module(
        "app.journal.views.card_markdown").anchor(source))
    # the week's changes that open a letter's Experiments section, both ways
    embeds.register("changes", view("week_changes", "changes_html"))
    embeds.register_markdown("changes", view("week_changes", "changes_markdown"))


def keep_private(data_dir: Path, database_url: str) -> None:
    """The notebook's files are its owner's alone, outside systemd too (whose unit sets
    UMask=0077 itself): this process writes files 0600 and folders 0700 (the database and
    its -wal and -shm, token hashes in it, backups, attachments, run files), and a data
    folder or database left readable by others is made private."""
    os.umask(0o077)
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    _tighten(data_dir, 0o700)
    prefix = "sqlite:///"
    if database_url.startswith(prefix) and not database_url.endswith(":memory:"):
        _tighten(Path(database_url[len(prefix):].split("?", 1)[0]), 0o600)


def _tighten(path: Path, mode: int) -> None:
    try:
        found = path.stat()
        if found.st_uid == os.getuid() and stat.S_IMODE(found.st_mode) & 0o077:
            path.chmod(mode)
    except OSError:
        pass  # not there yet, or not ours to change
