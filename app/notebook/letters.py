"""The weekly letter: one entry of kind "week" per ISO week, made from an editable
template (sections such as Notes / Experiments / Reading / Next). Created on demand for
the current week by the pages, the API, `commonplace up` and the scheduler's Monday job."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.orm import Session

from app.models import Entry, Setting
from app.notebook import entries
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


def find_letter(session: Session, week: str) -> Entry | None:
    return session.scalar(sa.select(Entry).where(Entry.kind == "week", Entry.iso_week == week))


def ensure_letter(session: Session, week: str, author: str) -> tuple[Entry, bool]:
    """The letter of `week`, created from the template if it does not exist yet.
    Must run in a write session. Returns (letter, created)."""
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


def ensure_this_week(db, timezone: str, author: str = "commonplace") -> tuple[str, bool]:
    """This week's letter exists afterwards: (week, created). The write lock is taken only
    when the letter is missing, so the common case is one read."""
    week = iso_week(today(timezone))
    with db.read() as session:
        if find_letter(session, week):
            return week, False
    with db.write() as session:
        _, created = ensure_letter(session, week, author)
    return week, created


def week_entries(session: Session, week: str) -> list[Entry]:
    """The week's ordinary entries, oldest first (the letter page lists them)."""
    return list(
        session.scalars(
            sa.select(Entry)
            .where(Entry.iso_week == week, Entry.kind == "entry")
            .order_by(Entry.date, Entry.id)
        )
    )
