"""Stored HTML kept in step with the renderer. Entries are rendered once, at save, so a
change to the markdown pipeline (a new feature, a sanitizer fix, numbered task boxes)
reaches old notes only when they are rendered again: this does it once per renderer
version, in batches of short write transactions, so the notebook stays usable while it
runs. The text and the history do not change; this is not a revision.
"""

from __future__ import annotations

import sqlalchemy as sa

from app.models import Entry, Setting
from app.notebook import render, saving

VERSION_KEY = "render_version"
BATCH = 200


def stale(db) -> bool:
    with db.read() as session:
        stored = session.get(Setting, VERSION_KEY)
    return stored is None or stored.value != str(render.VERSION)


def refresh_all(db) -> int:
    """Render every entry again if the renderer changed since the last time; returns how
    many were rendered (0 when nothing needed doing)."""
    if not stale(db):
        return 0
    done, after = 0, 0
    while True:
        with db.read() as reader:  # rendered outside the write lock, stored under it
            batch = list(reader.scalars(sa.select(Entry).where(Entry.id > after)
                                        .order_by(Entry.id).limit(BATCH)))
            refreshes = saving.prepare_refresh(reader, batch)
        if not batch:
            break
        with db.write() as session:
            saving.commit_refresh(session, refreshes, found=True)
        done, after = done + len(batch), batch[-1].id
    with db.write() as session:
        setting = session.get(Setting, VERSION_KEY)
        if setting is None:
            session.add(Setting(key=VERSION_KEY, value=str(render.VERSION)))
        else:
            setting.value = str(render.VERSION)
    return done
