"""Schedules in words: "every Sunday 02:00", "weekdays at 9", "every 6 hours" become the
five-field crontab line the scheduler stores; a crontab line is kept as it is. And a
crontab line becomes APScheduler's CronTrigger (`trigger`), here, where the scheduler's
clock can ask without loading the ORM (app/journal/clock.py).

    every day at 7:30 · daily · hourly · every 15 minutes · every 6 hours
    every Sunday 02:00 · sundays at 2am · on mon, wed and fri at 18:00
    weekdays at 9 · weekends at 10 · every month on the 1st at 03:00 · monthly

Anything else is refused with the forms it understands: a guess that fires at the wrong
time is worse than a question.
"""

from __future__ import annotations

import functools
import re
import zoneinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from apscheduler.triggers.base import BaseTrigger
from apscheduler.triggers.combining import OrTrigger
from apscheduler.triggers.cron import CronTrigger

from app.errors import Invalid

DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")  # crontab numbers them 0-6
TIME_RE = re.compile(
    r"(?:at\s+)?(?P<time>noon|midnight|(?P<h>\d{1,2})(?::(?P<m>\d{2}))?\s*(?P<ampm>am|pm|h)?)$")
EVERY_RE = re.compile(r"every\s+(?:(?P<n>\d{1,3})\s+)?(?P<unit>minute|hour|day)s?$")
# Files of the zone database that name no place, which ZoneInfo opens all the same:
# Factory (a zone whose abbreviation is "-00", "local time zone must be set"), posixrules
# (the rules a POSIX TZ string borrows) and localtime (this host's own, whatever it is).
NOT_ZONES = frozenset({"Factory", "posixrules", "localtime"})
HELP = ("say e.g. 'every Sunday 02:00', 'weekdays at 9', 'every day at 7:30', "
        "'every 6 hours', 'every 15 minutes', 'every month on the 1st at 03:00', "
        "or cron's five fields: minute hour day-of-month month day-of-week")
CRON_FIELDS = ("minute", "hour", "day-of-month", "month", "day-of-week")


def to_cron(text: str) -> str:
    """The crontab line for `text` (a phrase or already a crontab line), or Invalid."""
    if not isinstance(text, str) or not text.strip():
        raise Invalid(f"cron is required: {HELP}", "cron")
    words = " ".join(text.strip().split())
    if len(words.split()) == 5 and not re.search(r"[a-z]{4,}|\bat\b", words.lower()):
        return words  # already crontab (three-letter day and month names are crontab too)
    phrase = words.lower().replace(",", " ").replace(" and ", " ")
    phrase = " ".join(phrase.split())
    if phrase in ("hourly", "every hour"):
        return "0 * * * *"
    if phrase == "every minute":
        return "* * * * *"
    every = EVERY_RE.match(phrase)
    if every:
        n = int(every["n"] or 1)
        limit = {"minute": 59, "hour": 23, "day": 31}[every["unit"]]
        if not 1 <= n <= limit:
            raise Invalid(f"every {n} {every['unit']}s cannot be written as a schedule", "cron")
        step = f"*/{n}" if n > 1 else "*"
        return {"minute": f"{step} * * * *", "hour": f"0 {step} * * *",
                "day": f"0 0 {step} * *"}[every["unit"]]
    minute, hour, rest = _time(phrase)
    if rest in ("daily", "every day", "each day", ""):
        return f"{minute} {hour} * * *"
    if rest in ("weekdays", "on weekdays", "every weekday"):
        return f"{minute} {hour} * * mon-fri"
    if rest in ("weekends", "on weekends", "every weekend"):
        return f"{minute} {hour} * * sat,sun"
    if rest in ("weekly", "every week"):
        return f"{minute} {hour} * * sun"
    monthly = re.fullmatch(r"(?:monthly|every month)(?: on the (\d{1,2})(?:st|nd|rd|th)?)?",
                           rest)
    if monthly:
        day = int(monthly[1] or 1)
        if not 1 <= day <= 31:
            raise Invalid(f"a month has no day {day}", "cron")
        return f"{minute} {hour} {day} * *"
    days = _days(rest)
    if days:
        return f"{minute} {hour} * * {','.join(days)}"
    raise Invalid(f"cannot read {text.strip()!r} as a schedule: {HELP}", "cron")


def _time(phrase: str) -> tuple[int, int, str]:
    """(minute, hour, what is left) — a time of day at the end of the phrase, or midnight."""
    words = phrase.split()
    for take in (3, 2, 1):  # "at 2 pm", "at 02:00", "2am"
        if len(words) < take:
            continue
        match = TIME_RE.fullmatch(" ".join(words[-take:]))
        if match:
            return (*_clock(match), " ".join(words[:-take]))
    return 0, 0, phrase


def _clock(match: re.Match) -> tuple[int, int]:
    if match["time"] == "noon":
        return 0, 12
    if match["time"] == "midnight":
        return 0, 0
    hour, minute = int(match["h"]), int(match["m"] or 0)
    if match["ampm"] == "pm" and hour < 12:
        hour += 12
    elif match["ampm"] == "am" and hour == 12:
        hour = 0
    if hour > 23 or minute > 59 or (match["ampm"] in ("am", "pm") and int(match["h"]) > 12):
        raise Invalid(f"{match['time']} is not a time of day", "cron")
    return minute, hour


def _days(rest: str) -> list[str]:
    words = rest.split()
    if words and words[0] in ("every", "on", "each"):
        words = words[1:]
    days = []
    for word in words:
        day = word[:3]
        if day not in DAYS or not re.fullmatch(r"[a-z]+", word):
            return []
        if day not in days:
            days.append(day)
    return sorted(days, key=DAYS.index)


# -- crontab's day-of-week, as APScheduler reads it ----------------------------------------


def weekday_names(field: str) -> str:
    """A crontab day-of-week field with its numbers written as names. Crontab counts 0 (and
    7) as Sunday; APScheduler's CronTrigger counts 0 as Monday, so "0 2 * * 0" would fire
    on Mondays and "1-5" on Tuesday to Saturday. Names mean the same to both."""
    if not re.search(r"\d", field):
        return field
    chosen: list[int] = []
    for part in field.lower().split(","):
        base, _, step = part.partition("/")
        if step and (not step.isdecimal() or int(step) == 0):
            raise Invalid(f"day-of-week: bad step in {part!r}", "cron")
        if base == "*":
            low, high = 0, 6
        elif "-" in base:
            low, high = (_day_number(x) for x in base.split("-", 1))
        else:
            low = _day_number(base)
            high = 6 if step else low
        if high < low:
            raise Invalid(f"day-of-week: {part!r} runs backwards", "cron")
        days = range(low, high + 1, int(step) if step else 1)
        chosen += [d % 7 for d in days]
    return ",".join(DAYS[d] for d in sorted(set(chosen)))


def _day_number(text: str) -> int:
    if text.isdecimal() and int(text) <= 7:
        return int(text)
    if text[:3] in DAYS:
        return DAYS.index(text[:3])
    raise Invalid(f"day-of-week: {text!r} is not a day (0-7 or sun-sat)", "cron")


# -- a crontab line as APScheduler's trigger ------------------------------------------------


@functools.cache
def zones() -> frozenset[str]:
    """The time zones a schedule may name: the zone database's, less NOT_ZONES."""
    return frozenset(zoneinfo.available_timezones()) - NOT_ZONES


def check_zone(timezone: object) -> None:
    """Invalid unless `timezone` is one of zones(): what a save and the preview check (the
    scheduler's clock opens a stored zone as it is, so an older schedule still fires)."""
    if not isinstance(timezone, str) or timezone not in zones():
        raise Invalid(f"unknown time zone {str(timezone)[:60]!r}", "timezone")


def trigger(cron: str, timezone: str) -> BaseTrigger:
    """APScheduler's trigger for a five-field crontab line, with crontab's meaning of
    day-of-week numbers and of two day fields, or Invalid naming what is wrong. The one
    place a schedule becomes a trigger: the pages, the API and the scheduler process all
    ask here."""
    if not isinstance(cron, str) or not cron.strip():
        raise Invalid("cron is required, e.g. '0 2 * * sun' (Sundays at 02:00)", "cron")
    fields = cron.split()
    if len(fields) != 5:
        raise Invalid("cron has five fields: minute hour day-of-month month day-of-week",
                      "cron")
    try:
        zone = ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError, TypeError):
        raise Invalid(f"unknown time zone {timezone!r}", "timezone") from None
    minute, hour, day, month, weekday = fields
    given = {"minute": minute, "hour": hour, "day": day, "month": month,
             "day_of_week": weekday_names(weekday)}
    try:
        both = CronTrigger(**given, timezone=zone)
    except (ValueError, TypeError) as exc:
        # APScheduler quotes the bad value but not its field ("'61': the last value (61)
        # is higher than the maximum value (59)"): name the field the user wrote.
        for (arg, value), name, written in zip(given.items(), CRON_FIELDS, fields, strict=True):
            try:
                CronTrigger(**{arg: value}, timezone=zone)
            except (ValueError, TypeError) as alone:
                why = str(alone).removeprefix(f"Error validating expression {written!r}: ")
                raise Invalid(f"cron's {name} field {written!r}: {why}", "cron") from None
        raise Invalid(f"cron: {exc}", "cron") from None
    if day.startswith("*") or weekday.startswith("*"):
        return both
    # Both day fields restricted: crontab fires on a day that matches either ("0 9 1 * mon",
    # the 1st and every Monday), CronTrigger only on one that matches both. As cron reads
    # it, a field starting with "*" ("*/2" too) leaves the other one alone.
    return OrTrigger([CronTrigger(**{**given, "day_of_week": "*"}, timezone=zone),
                      CronTrigger(**{**given, "day": "*"}, timezone=zone)])
