"""Pages kept between views. Home, the letter, the site map and a tag's page are read far
more often than the notebook changes (the letter above all: the owner reloads it through
the week), and each costs a few queries and a template with dozens of lines.

The process keeps the last pages it rendered, with the notebook's version they were read
at (browse.version: notebook_version.n, which triggers move with every row written to
`entry`, from any connection or process, so it is the same for every connection). A
view of the same URL, by the same reader, on the same day, at the same version, is
answered with the kept HTML; anything else renders afresh. So a save anywhere (the web,
the CLI, an import, the scheduler posting a card) shows on the next view, and nothing is
invalidated by hand; writes to the journal (a runner's long poll, a run's progress, a
token's last use) leave the kept pages alone. The version is read in the request's own
transaction, before the view reads anything, so a kept page is never newer than its key
says it is: on get_reader's connection (a kept view asks for nothing more), and again,
after a view that rendered, in the session that view read through (app/db.py: asking for
a session ends the reader's snapshot), so the two must agree for the page to be kept.

Only views whose HTML depends on nothing but the URL, the reader, the day and the
database are kept, and only a view that read one version throughout: the first view of a
week, which creates its letter (current_letter), is kept from the next view on. Other
databases render every time.
"""

from __future__ import annotations

import functools
import threading

from flask import current_app, g, request

from app.db import get_reader
from app.notebook import browse, isoweeks

KEPT_PAGES = 64  # per process: home, this week, years of the site map, tags, per reader
_evicting = threading.Lock()  # a worker's threads share the pages


def kept(view):
    """Decorate a page view (under its route) whose HTML is kept as described above."""

    @functools.wraps(view)
    def keep_or_render(**kwargs):
        version = browse.version(get_reader())
        if version is None:
            return view(**kwargs)
        identity = g.get("identity")
        key = (request.script_root, request.full_path,
               isoweeks.today(current_app.config["TIMEZONE"]),
               identity.login if identity else "", identity.role if identity else "")
        pages = current_app.extensions.setdefault("kept_pages", {})
        found = pages.get(key)
        if found is not None and found[0] == version:
            return found[1]
        html = view(**kwargs)
        # Kept only if it is a rendered page (not a redirect) and the view read one version
        # throughout: a view that wrote, or whose session began again, is not kept.
        if isinstance(html, str) and browse.version(get_reader()) == version:
            with _evicting:
                if key not in pages and len(pages) >= KEPT_PAGES:
                    del pages[next(iter(pages))]  # the oldest
                pages[key] = (version, html)
        return html

    return keep_or_render
