"""Where an entry, a letter, a tag and an entry's own pages live: plain paths, built by
hand rather than by url_for, so they work outside a request (the CLI, the scheduler, the
mirror, a bulk import's worker processes) and cost an f-string where a page shows many.
A notebook's every entry has its own; a cache of built URLs would only churn over them.
tests/app/web/test_pages.py checks an entry's own pages' paths against the routes.
"""

from __future__ import annotations

import functools
from urllib.parse import quote

from app.models import Entry


def entry_url(entry: Entry) -> str:
    return week_url(entry.iso_week) if entry.kind == "week" else f"/entries/{entry.id}/{entry.slug}"


def week_url(week: str) -> str:
    return f"/weeks/{week}"


ENTRY_ACTIONS = ("edit", "history", "delete")  # pages at /entries/<id>/<action> (editing.py)


def action_url(entry: Entry, action: str) -> str:
    """An entry's (or a letter's) edit, history or delete page. Every entry page links to
    three: through url_for and its cache they were built again on every page."""
    if action not in ENTRY_ACTIONS:
        raise ValueError(f"no entry page {action!r}")
    return f"/entries/{entry.id}/{action}"


@functools.lru_cache(maxsize=4096)  # a list's tags repeat; quote() is not free
def tag_url(tag: str) -> str:
    return f"/tags/{quote(tag)}"
