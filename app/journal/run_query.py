"""The run list's query, shared by the /runs page and GET /api/v1/runs.

Filters (all AND-ed): status (comma-separated), experiment, week (ISO week of creation in
the owner's zone), schedule (id), and any parameter: `param.<name>=<value>` (repeatable;
a list parameter matches when it holds the value), or `params=<name>=<value> …` (the
page's text box, space-separated). A parameter no run has simply matches nothing.

Order: newest first, or `sort=<result key>` (app/journal/run_metrics.py: `mfu`,
`step_time_s`, `1f1b.step_time_s`, `all_reduce.busbw_Bps`, …) with `order=asc|desc`
(default: best first, e.g. step time ascending, MFU descending). A sorted list holds only
the runs that have that result, ties broken by run id.

Paging is by keyset: `cursor` is what the previous page's `next_cursor` said (a run id
newest first — `before` is its older name — or `<value>,<run id>` when sorted). Every
bad argument is Invalid naming it. The list reads only the columns it shows, never a
run's result JSON (that made the newest 100 slow), as rows, not Run objects: building
100 ORM objects and reading them through instrumented attributes (and each one's runner)
was most of the newest 100's time in-process (docs/PERFORMANCE.md, *The run list*). A row has a
Run's attribute names for these columns, and `runner_name` as Run has.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.orm import Session, aliased

from app.errors import Invalid
from app.journal import run_metrics
from app.models import Run, RunMetric, Runner, RunParam
from app.notebook.isoweeks import week_span_utc
from base import statuses

MAX_PARAM_FILTERS = 8
MAX_COMPARE = 10  # runs side by side, on the compare page and GET /api/v1/compare
MAX_ID = 2**63 - 1
# What a row of the list shows (the pages' table, the API's run summary)
LIST_COLUMNS = (
    Run.id, Run.experiment, Run.params, Run.status, Run.reason, Run.reason_code,
    Run.trigger, Run.created_by, Run.parent_id, Run.schedule_id, Run.scheduled_for,
    Run.runner_id, Run.cancel_requested_at, Run.created_at, Run.leased_at, Run.started_at,
    Run.finished_at, Run.progress_step, Run.progress_total, Run.progress, Run.nodes,
    Runner.name.label("runner_name"),
)


@dataclass
class Listing:
    stmt: sa.Select  # rows of LIST_COLUMNS and the sorted result (None when unsorted)
    sort: str = ""
    order: str = "desc"

    def page(self, session: Session, limit: int, *, offset: int = 0) \
            -> tuple[list[tuple[sa.Row, float | None]], str]:
        """Up to `limit` (run row, sorted value) pairs and the cursor of the next page (""
        when this is the last)."""
        rows = [(r, r[-1]) for r in session.execute(self.stmt.limit(limit + 1).offset(offset))]
        more = len(rows) > limit
        rows = rows[:limit]
        if not more or not rows:
            return rows, ""
        run, value = rows[-1]
        return rows, f"{value!r},{run.id}" if self.sort else str(run.id)


def arg(args, name: str) -> str:
    value = args.get(name)
    return value.strip() if isinstance(value, str) else ""


def values(args, name: str) -> list[str]:
    getlist = getattr(args, "getlist", None)
    raw = getlist(name) if getlist else [args.get(name)]
    return [v.strip() for v in raw if isinstance(v, str) and v.strip()]


def run_id(text: str, field: str) -> int:
    if not text.isdecimal() or len(text) > 19 or not 0 < int(text) <= MAX_ID:
        raise Invalid(f"{field} is a run id", field)
    return int(text)


def param_filters(args) -> list[tuple[str, str]]:
    """(name, value) pairs from param.<name>=<value> and the params text box."""
    pairs = []
    for key in list(args.keys()):
        if key.startswith("param."):
            pairs += [(key.removeprefix("param."), v) for v in values(args, key)]
    for word in arg(args, "params").split():
        name, eq, value = word.partition("=")
        if not eq or not name or not value:
            raise Invalid(f"params is name=value pairs (e.g. strategies=1f1b), "
                          f"not {word[:40]!r}", "params")
        pairs.append((name, value))
    for name, _ in pairs:
        if not run_metrics.PARAM_KEY_RE.fullmatch(name):
            raise Invalid(f"param.{name[:40]} is not a parameter name", f"param.{name[:40]}")
    if len(pairs) > MAX_PARAM_FILTERS:
        raise Invalid(f"at most {MAX_PARAM_FILTERS} parameter filters", "params")
    return pairs


def run_filters(args, timezone: str, runs_table) -> list:
    """Conditions on the run's own columns (status, experiment, week, schedule), written
    against `runs_table` (Run, or an alias of it in a subquery)."""
    r, where = runs_table, []
    status = arg(args, "status")
    if status:
        wanted = [s.strip().upper() for s in status.split(",")]
        if any(s not in statuses.STATUSES for s in wanted):
            raise Invalid(f"status is one of {', '.join(statuses.STATUSES)}", "status")
        where.append(r.status.in_(wanted))
    if arg(args, "experiment"):
        where.append(r.experiment == arg(args, "experiment"))
    week = arg(args, "week")
    if week:
        try:
            start, end = week_span_utc(week, timezone)
        except ValueError as exc:
            raise Invalid(str(exc), "week") from None
        where += [r.created_at >= start, r.created_at < end]
    if arg(args, "schedule"):
        text = arg(args, "schedule")
        if not text.isdecimal() or len(text) > 19 or int(text) > MAX_ID:
            raise Invalid("schedule is a schedule id", "schedule")
        where.append(r.schedule_id == int(text))
    return where


def listing(args, timezone: str = "UTC") -> Listing:
    """The run list's statement for these arguments (a Mapping: request.args or a dict).

    Newest first, every filter is on run (its indexes give ids in order). Sorted, the
    result's index (key, value, run_id) gives the order and every filter becomes a set of
    run ids checked against it, so a filter that matches few runs never reads the run
    rows the sort passes over (EXPLAIN QUERY PLAN: bench/runs.py)."""
    sort = arg(args, "sort")
    inner = aliased(Run, name="filtered") if sort else Run
    where = run_filters(args, timezone, inner)
    params = [sa.select(RunParam.run_id).where(
        RunParam.key == name, RunParam.value.in_(run_metrics.query_texts(value)))
        for name, value in param_filters(args)]
    stmt = sa.select(*LIST_COLUMNS).outerjoin(Runner, Runner.id == Run.runner_id)
    if not sort:
        stmt = stmt.where(*where, *(Run.id.in_(ids) for ids in params))
    else:
        if where:
            params.append(sa.select(inner.id).where(*where))
        stmt = stmt.where(*(RunMetric.run_id.in_(ids) for ids in params))
    order = arg(args, "order").lower()
    if sort and not run_metrics.check_sort_key(sort):
        raise Invalid(f"sort is a result such as {', '.join(run_metrics.METRICS)}, "
                      "alone or after a strategy (1f1b.step_time_s)", "sort")
    if order not in ("", "asc", "desc"):
        raise Invalid("order is asc or desc", "order")
    cursor = arg(args, "cursor") or arg(args, "before")
    field = "cursor" if arg(args, "cursor") else "before"
    if not sort:
        if cursor:
            stmt = stmt.where(Run.id < run_id(cursor, field))
        return Listing(stmt.add_columns(sa.null()).order_by(Run.id.desc()), order="desc")
    metric = sort.rpartition(".")[2]
    order = order or ("asc" if run_metrics.METRICS[metric] == run_metrics.LOWER else "desc")
    stmt = stmt.add_columns(RunMetric.value).join(
        RunMetric, sa.and_(RunMetric.run_id == Run.id, RunMetric.key == sort))
    key = sa.tuple_(RunMetric.value, RunMetric.run_id)
    if cursor:
        value, comma, last = cursor.rpartition(",")
        try:
            number = float(value) if comma else math.nan
        except ValueError:
            number = math.nan
        if not math.isfinite(number):
            raise Invalid("cursor is <value>,<run id> from next_cursor", field)
        after = sa.tuple_(sa.literal(number), sa.literal(run_id(last, field)))
        stmt = stmt.where(key > after if order == "asc" else key < after)
    if order == "asc":
        stmt = stmt.order_by(RunMetric.value.asc(), RunMetric.run_id.asc())
    else:
        stmt = stmt.order_by(RunMetric.value.desc(), RunMetric.run_id.desc())
    return Listing(stmt, sort=sort, order=order)


# -- one experiment's page ----------------------------------------------------------------

# The results a run's line on its experiment's page shows: the bare keys of run_metrics,
# each the best correct strategy's, so one line serves every experiment.
HEADLINE_KEYS = ("step_time_s", "tokens_per_s", "mfu", "peak_memory_bytes", "busbw_Bps",
                 "peak_flops", "copy_bandwidth_Bps")


def recent(session: Session, experiment: str,
           limit: int) -> list[tuple[sa.Row, dict[str, tuple[float, str]]]]:
    """The experiment's latest runs, newest first, each with its headline results by key:
    (value, the strategy or collective it is the best of, "" for a run-wide number). From
    run_metric rows: no result JSON is read."""
    rows = list(session.execute(
        sa.select(Run.id, Run.status, Run.reason, Run.trigger, Run.created_at,
                  Run.finished_at, Run.param_key)
        .where(Run.experiment == experiment).order_by(Run.id.desc()).limit(limit)))
    found: dict[int, dict[str, float]] = {}
    for run_id_, key, value in session.execute(
            sa.select(RunMetric.run_id, RunMetric.key, RunMetric.value)
            .where(RunMetric.run_id.in_([r.id for r in rows]),
                   RunMetric.key.in_(HEADLINE_KEYS) | RunMetric.key.contains("."))):
        found.setdefault(run_id_, {})[key] = value
    return [(r, headlines(found.get(r.id, {}))) for r in rows]


def headlines(metrics: dict[str, float]) -> dict[str, tuple[float, str]]:
    """A run's headline numbers, each with the group whose number it is: a headline is the
    best group's (run_metrics.derive), and "tokens/s 7.1 ktok/s" alone does not say which
    strategy reached it. The reference ("single") is never the headline's."""
    named: dict[str, tuple[float, str]] = {}
    for key in HEADLINE_KEYS:
        if key not in metrics:
            continue
        groups = sorted(k.rpartition(".")[0] for k, v in metrics.items()
                        if k.rpartition(".")[2] == key and v == metrics[key]
                        and k.rpartition(".")[0] not in ("", "single"))
        named[key] = (metrics[key], groups[0] if groups else "")
    return named


def compared_sets(session: Session, experiment: str, limit: int) -> list[sa.Row]:
    """The parameter sets (comparison keys) the experiment's successful runs measured,
    the latest first: key, runs, and the latest run's id and parameters (its trend page)."""
    grouped = (sa.select(Run.param_key.label("key"), sa.func.count().label("runs"),
                         sa.func.max(Run.id).label("latest"))
               .where(Run.experiment == experiment, Run.status == statuses.SUCCEEDED,
                      Run.param_key.is_not(None), Run.finished_at.is_not(None))
               .group_by(Run.param_key).order_by(sa.desc("latest")).limit(limit)).subquery()
    return list(session.execute(
        sa.select(grouped.c.key, grouped.c.runs, grouped.c.latest, Run.params)
        .join(Run, Run.id == grouped.c.latest).order_by(grouped.c.latest.desc())))
