"""The weekly letter: one entry of kind "week" per ISO week, made from an editable
template (sections such as Notes / Experiments / Reading / Next). Created on demand for
the current week by the pages, the API, `commonplace up` and the scheduler's Monday job."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.orm import Session

from app.db import Prepared
from app.models import Entry, Setting
from app.notebook import entries, mirror, saving
from app.notebook.entry_rows import LISTED, WHOLE, EntryRow, rows
from app.notebook.isoweeks import iso_week, today, week_bounds

TEMPLATE_KEY = "letter_template"
MAX_TEMPLATE = 20_000
DEFAULT_TEMPLATE = """\
## Notes

## Experiments

## Reading

## Next
"""


def letter_template(session: Session) -> str:
    setting = session.get(Setting, TEMPLATE_KEY)
    return setting.value if setting else DEFAULT_TEMPLATE


def set_letter_template(session: Session, text: str) -> None:
    setting = session.get(Setting, TEMPLATE_KEY)
    if setting:
        setting.value = text
    else:
        session.add(Setting(key=TEMPLATE_KEY, value=text))


# Built once: every home and letter view runs it.
FIND_LETTER = sa.select(Entry).where(Entry.kind == "week",
                                     Entry.iso_week == sa.bindparam("week"))


def find_letter(session: Session, week: str) -> Entry | None:
    return session.scalar(FIND_LETTER, {"week": week})


LETTER_ROW = Prepared(sa.select(*WHOLE).where(Entry.kind == "week",
                                             Entry.iso_week == sa.bindparam("week")))


def letter_row(session: Session, week: str) -> EntryRow | None:
    """The letter of `week` to show (a row, app/notebook/entry_rows.py), or None."""
    found = rows(session, LETTER_ROW, {"week": week})
    return found[0] if found else None


def ensure_letter(session: Session, week: str, author: str) -> tuple[Entry, bool]:
    """The letter of `week`, created from the template if it does not exist yet, rendered
    in `session`, a write session (create_letter renders before taking the lock).
    Returns (letter, created)."""
    letter = find_letter(session, week)
    if letter:
        return letter, False
    monday, _ = week_bounds(week)
    letter = entries.create(
        session,
        author=author,
        kind="week",
        date=monday,
        title=f"Week {week}",
        body=letter_template(session),
        tags=[],
        status="published",
        note="created from the letter template",
    )
    return letter, True


def create_letter(db, week: str, author: str) -> bool:
    """The letter of `week` exists afterwards; returns whether this call made it. The write
    lock is taken only when it is missing, and the template is rendered before
    (saving.py), so the common case is one read."""
    for _ in range(saving.ATTEMPTS):
        with db.read() as reader:
            if find_letter(reader, week):
                return False
            monday, _ = week_bounds(week)
            prepared = saving.prepare_create(
                reader, kind="week", date=monday, title=f"Week {week}",
                body=letter_template(reader), tags=[], status="published",
                note="created from the letter template")
        try:
            with db.write() as session:
                if find_letter(session, week):
                    return False  # made meanwhile
                saving.commit(session, prepared, author=author)
        except saving.Moved:
            continue
        mirror.write_queued(session)
        return True
    raise saving.kept_moving()


def ensure_this_week(db, timezone: str, author: str = "commonplace") -> tuple[str, bool]:
    """This week's letter exists afterwards: (week, created)."""
    week = iso_week(today(timezone))
    return week, create_letter(db, week, author)


def this_weeks_letter(db, session: Session, timezone: str,
                      author: str = "commonplace") -> tuple[str, EntryRow]:
    """This week and its letter, read in `session` (a request's read session). Only when the
    letter is missing is it created, in a write transaction of its own; `session` then
    starts a new snapshot, which holds it. So the common case is one statement on the
    request's own connection: no second connection, no write lock."""
    week = iso_week(today(timezone))
    letter = letter_row(session, week)
    if letter is None:
        create_letter(db, week, author)
        session.rollback()  # end the read snapshot taken before the letter existed
        letter = letter_row(session, week)
    return week, letter


def week_entries(session: Session, week: str) -> list[EntryRow]:
    """The week's ordinary entries, oldest first (the letter page lists them: titles,
    dates and tags, never bodies).

    Selected by week alone, the kind checked here: with `kind = 'entry'` in the WHERE,
    SQLite walks ix_entry_kind_date (every entry, in date order) instead of the week's few
    rows in ix_entry_iso_week, and the letter page cost grew with the notebook."""
    found = rows(session, WEEK_ENTRIES, {"week": week})
    return [e for e in found if e.kind == "entry"]


WEEK_ENTRIES = Prepared(sa.select(*LISTED).where(Entry.iso_week == sa.bindparam("week"))
                        .order_by(Entry.date, Entry.id))
