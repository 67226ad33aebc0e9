"""A view's save: prepared outside the write lock, committed under it
(app/notebook/saving.py), and prepared again if the notebook moved in between."""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy.orm import Session

from app.db import get_db, get_session
from app.models import Entry
from app.notebook import saving


def save(prepare: Callable[[Session], saving.Prepared],
         author: str) -> tuple[Session, Entry, int]:
    """The request's write session, with the save written and not yet committed (the view
    commits it: mirror.commit), the entry, and the revision the save was made on top of
    (the entry's revision when the save began, if the base was older: merged onto it)."""
    for _ in range(saving.ATTEMPTS):
        with get_db().read() as reader:
            prepared = prepare(reader)
        session = get_session()
        try:
            return session, saving.commit(session, prepared, author=author), prepared.revision
        except saving.Moved:
            session.rollback()  # the lock goes; nothing was written
    raise saving.kept_moving()
