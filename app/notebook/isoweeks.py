"""ISO weeks: the notebook's calendar. A letter belongs to one ISO week ("2024-W13"),
every entry to the week of its date, and "this week" is read in the notebook's time zone."""

from __future__ import annotations

import datetime as dt
import re
from zoneinfo import ZoneInfo

WEEK_RE = re.compile(r"^(\d{4})-W(\d{2})$")


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


def shift_week(week: str, days: int) -> str:
    monday, _ = week_bounds(week)
    return iso_week(monday + dt.timedelta(days=days))


def today(timezone: str) -> dt.date:
    return dt.datetime.now(ZoneInfo(timezone)).date()


# Times are stored in UTC (naive); the owner reads them in the notebook's zone.


def local(moment: dt.datetime, timezone: str) -> dt.datetime:
    """A stored UTC time as the owner's clock shows it."""
    return moment.replace(tzinfo=dt.UTC).astimezone(ZoneInfo(timezone))


def week_span_utc(week: str, timezone: str) -> tuple[dt.datetime, dt.datetime]:
    """[start, end) of an ISO week in the owner's zone, as stored (UTC, naive) times."""
    monday, _ = week_bounds(week)
    zone = ZoneInfo(timezone)
    start = dt.datetime.combine(monday, dt.time(), zone)
    end = dt.datetime.combine(monday + dt.timedelta(days=7), dt.time(), zone)
    return (start.astimezone(dt.UTC).replace(tzinfo=None),
            end.astimezone(dt.UTC).replace(tzinfo=None))
