"""ISO weeks and the weekly letter: one entry of kind "week" per ISO week, made from a template."""

from __future__ import annotations

import datetime as dt
import re
from zoneinfo import ZoneInfo

import sqlalchemy as sa
from sqlalchemy.orm import Session

from app.models import Entry, Setting

WEEK_RE = re.compile(r"^(\d{4})-W(\d{2})$")
TEMPLATE_KEY = "letter_template"
DEFAULT_TEMPLATE = """\
## Notes

## Experiments

## Reading

## Next
"""


def iso_week(day: dt.date) -> str:
    year, week, _ = day.isocalendar()
    return f"{year}-W{week:02d}"


def parse_week(text: str) -> tuple[int, int]:
    """"2024-W13" → (2024, 13); ValueError for anything that is not a real ISO week."""
    match = WEEK_RE.match(text or "")
    if not match:
        raise ValueError(f"{text!r} is not an ISO week like 2024-W13")
    year, week = int(match[1]), int(match[2])
    try:
        dt.date.fromisocalendar(year, week, 1)
    except ValueError:
        raise ValueError(f"{year} has no week {week}") from None
    return year, week


def week_bounds(week: str) -> tuple[dt.date, dt.date]:
    """Monday and Sunday of an ISO week."""
    year, number = parse_week(week)
    monday = dt.date.fromisocalendar(year, number, 1)
    return monday, monday + dt.timedelta(days=6)


def today(timezone: str) -> dt.date:
    return dt.datetime.now(ZoneInfo(timezone)).date()


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
    from app import entries  # entries renders and indexes; weeks stays a leaf module

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
