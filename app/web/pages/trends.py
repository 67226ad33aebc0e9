"""Trend pages: a schedule's runs, or every run of one experiment with one comparison key
(app/journal/run_metrics.comparison_key), drawn over time per headline number with each
run's measured spread, the environment's changes marked, every point linking its run.

    /schedules/<id>/trend        the schedule's successful runs
    /trends/<key>                the successful runs that measured the same thing

?runs=N shows the latest N (2-200, default DEFAULT_RUNS).
"""

from __future__ import annotations

import json
import re

from flask import abort, current_app, render_template, request

from app.db import get_session
from app.journal import run_metrics, schedules, trends
from app.journal.views import card_trend, cards, trend_chart, week_changes
from app.web.pages.blueprints import experiments as bp

DEFAULT_RUNS, MAX_RUNS = 52, 200  # a year of a weekly schedule
KEY_RE = re.compile(r"[0-9a-f]{32}")


def _count() -> int:
    raw = request.args.get("runs", str(DEFAULT_RUNS))
    if not (raw.isascii() and raw.isdigit() and 2 <= int(raw) <= MAX_RUNS):
        abort(400, description=f"runs is a whole number from 2 to {MAX_RUNS}")
    return int(raw)


def page(runs: list, heading: str, context: str, **links):
    timezone = current_app.config["TIMEZONE"]
    marks = trend_chart.environment_marks(runs)
    by_run = {runs[i].id: changed for i, changed in marks}
    drawn = [(s, c) for s in trend_chart.collect(runs)
             if (c := trend_chart.chart(s, by_run, timezone))]
    latest = trend_chart.latest_lines(runs, get_session(), timezone)
    # the latest run's week, as the letter's changes block sums it up
    group = week_changes.group_of(get_session(), runs[-1], timezone) if runs else None
    week = card_trend.week_of(runs[-1], timezone) if runs else ""
    return render_template("experiments/trend.html", runs=runs, heading=heading,
                           context=context, charts=drawn, marks=marks, latest=latest,
                           week=week, week_group=group,
                           week_html=week_changes.groups_html([group], timezone)
                           if group and group.mattering else "", **links)


@bp.get("/schedules/<int:schedule_id>/trend")
def schedule_trend(schedule_id: int):
    count = _count()
    session = get_session()
    schedule = schedules.get(session, schedule_id)  # 404 for no such schedule
    runs = trends.series(session, schedule_id=schedule.id, limit=count)
    return page(runs, f"Trend of {schedule.name}", f"the successful runs of schedule "
                f"#{schedule.id}", schedule=schedule)


@bp.get("/trends/<key>")
def key_trend(key: str):
    if not KEY_RE.fullmatch(key):
        abort(404, description="a trend is named by its runs' 32-character comparison key")
    count = _count()
    runs = trends.series(get_session(), param_key=key, limit=count)
    if not runs:
        abort(404, description="no successful run has these parameters")
    params, sampling = parameters(runs)
    return page(runs, f"Trend of {cards.title_of(runs[-1].experiment)}",
                "the successful runs of one experiment with the same parameters (the "
                "sampling ones aside)", params=params, sampling=sampling)


def parameters(runs: list) -> tuple[dict, list[tuple[str, list]]]:
    """The parameters that define the trend (its key's: the same in every run), and each
    sampling parameter with the values the runs shown took (one value: the same in all)."""
    params = {k: v for k, v in (runs[-1].params or {}).items()
              if k not in run_metrics.SAMPLING}
    sampling = []
    for name in sorted({k for r in runs for k in r.params or {}} & run_metrics.SAMPLING):
        taken: dict[str, object] = {}  # by JSON text: a value may be a list
        for r in runs:
            value = (r.params or {}).get(name)
            taken.setdefault(json.dumps(value, sort_keys=True), value)
        sampling.append((name, sorted(taken.values(), key=_in_order)))
    return params, sampling


def _in_order(value) -> tuple:
    """Numbers by size, then anything else by its text; a run without the parameter last."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    return value is None, not number, value if number else str(value)
