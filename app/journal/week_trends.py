"""A week of the same thing measured again: the runs of one comparison key that finished
in one week, summed up together against the runs before the week, as a person would say
it rather than run by run (the week's changes block and the trend page; a card still
speaks for its own run, app/journal/views/card_trend.py).

The reference: the median of the trends.BASELINE_RUNS comparable runs that finished
before the week, each number's band the median of their spreads (none measured by one of
them: no band, so the assumed noise). A key first measured this week has no reference: a
run of the same week is none, so its group says the week's range alone (`first`).

Per headline number of the week's latest run: its change against the reference, judged
as trends judges two runs (trends.noise_between); the week's range; and the first run of
the week that was beyond noise the wrong way, judged the same way, so a regression is
named once, where it appeared (and one that the latest run recovered from is still said).

Torch-free and write-free: functions take an open session and never commit.
"""

from __future__ import annotations

import datetime as dt
import statistics
from dataclasses import dataclass, replace

import sqlalchemy as sa
from sqlalchemy.orm import Session

from app.journal import trends
from app.journal.trends import Change, Number
from app.models import Run
from base import statuses

MAX_RUNS = 200  # runs of one week looked at


@dataclass(frozen=True)
class WeekNumber:
    change: Change  # the latest run's number against the reference
    low: float  # the week's range, over the runs of the week that measured it
    high: float
    count: int
    first_bad: Run | None = None  # the first run of the week beyond noise the wrong way
    first_bad_number: Number | None = None

    @property
    def regression(self) -> bool:
        return self.change.regression

    @property
    def recovered(self) -> bool:
        """A run of the week regressed, and the latest is back within noise."""
        return self.first_bad is not None and not self.regression

    @property
    def matters(self) -> bool:
        return self.change.beyond or self.first_bad is not None


@dataclass
class WeekGroup:
    key: str
    runs: list[Run]  # the week's, oldest first
    before: list[Run]  # the reference runs, latest first; empty: the first week
    numbers: list[WeekNumber]  # in the first week, changes with no `before`: the range

    @property
    def latest(self) -> Run:
        return self.runs[-1]

    @property
    def first(self) -> bool:
        """No comparable run before the week: nothing to compare with, only its range."""
        return not self.before

    @property
    def mattering(self) -> list[WeekNumber]:
        """What the week's block says: the numbers that moved, or in the first week of a
        key measured more than once, every number's range."""
        if self.first:
            return self.numbers if len(self.runs) > 1 else []
        return [n for n in self.numbers if n.matters]

    @property
    def regressions(self) -> list[WeekNumber]:
        return [n for n in self.numbers if n.regression]


def week_runs(session: Session, start: dt.datetime, end: dt.datetime,
              key: str | None = None) -> list[Run]:
    """The successful runs that finished in [start, end), oldest first (of one key)."""
    query = sa.select(Run).where(Run.status == statuses.SUCCEEDED, Run.finished_at >= start,
                                 Run.finished_at < end)
    if key is not None:
        query = query.where(Run.param_key == key)
    return list(session.scalars(query.order_by(Run.finished_at, Run.id).limit(MAX_RUNS)))


def groups(session: Session, start: dt.datetime, end: dt.datetime) -> list[WeekGroup]:
    """One group per comparison key that has runs in the week, in the order the keys
    first finished a run; keys with nothing to compare are left out."""
    by_key: dict[str, list[Run]] = {}
    for run in week_runs(session, start, end):
        if run.param_key:
            by_key.setdefault(run.param_key, []).append(run)
    return [g for key, runs in by_key.items() if (g := _group(session, key, runs, start))]


def group_of(session: Session, run: Run, start: dt.datetime, end: dt.datetime
             ) -> WeekGroup | None:
    """The group of the run's key in the week [start, end)."""
    if not run.param_key:
        return None
    return _group(session, run.param_key, week_runs(session, start, end, run.param_key),
                  start)


def _group(session: Session, key: str, runs: list[Run], start: dt.datetime
           ) -> WeekGroup | None:
    table = [(r, numbers) for r in runs if (numbers := trends.headlines(r.result))]
    before = list(session.scalars(
        sa.select(Run).where(Run.param_key == key, Run.status == statuses.SUCCEEDED,
                             Run.finished_at < start)
        .order_by(Run.finished_at.desc(), Run.id.desc()).limit(trends.BASELINE_RUNS)))
    earlier = [(r, numbers) for r in before if (numbers := trends.headlines(r.result))]
    before = [r for r, _ in earlier]  # the runs the median is of, as the block counts them
    if not table:
        return None
    if not earlier:
        return WeekGroup(key, [r for r, _ in table], [], [
            _range(table, name, Change(number, None, trends.DEFAULT_NOISE, False))
            for name, number in table[-1][1].items()])
    reference = _median([numbers for _, numbers in earlier])
    found = []
    for name, number in table[-1][1].items():
        ref = reference.get(name)
        if ref is None:
            continue  # not measured before: the card says so
        bad = next(((r, numbers[name]) for r, numbers in table
                    if name in numbers and against(numbers[name], ref).regression),
                   (None, None))
        found.append(_range(table, name, against(number, ref), *bad))
    return WeekGroup(key, [r for r, _ in table], before, found)


def _range(table: list[tuple[Run, dict[str, Number]]], name: str, change: Change,
           *bad) -> WeekNumber:
    """The latest run's `change` of one number with the week's range of it."""
    values = [numbers[name].value for _, numbers in table if name in numbers]
    return WeekNumber(change, min(values), max(values), len(values), *bad)


def against(now: Number, reference: Number) -> Change:
    noise, measured = trends.noise_between(now, reference)
    return Change(now, reference, noise, measured)


def _median(earlier: list[dict[str, Number]]) -> dict[str, Number]:
    """Per number, the median of the runs before; its band the median of their spreads."""
    out = {}
    for name in {k for numbers in earlier for k in numbers}:
        seen = [numbers[name] for numbers in earlier if name in numbers]
        value = statistics.median(n.value for n in seen)
        spreads = [n.spread for n in seen]
        band = (None, None)
        if None not in spreads:
            spread = statistics.median(spreads)  # type: ignore[type-var]
            band = (value * (1 - spread), value * (1 + spread))
        out[name] = replace(seen[0], value=value, low=band[0], high=band[1])
    return out
