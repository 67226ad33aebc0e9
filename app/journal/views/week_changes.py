"""The changes that matter this week: what opens a letter's Experiments section. Every run
that finished in the week and moved a headline number beyond its noise, one line per
number (app/journal/views/card_trend.py), a regression as a warning callout.

It is a fenced block in the letter, rendered when the letter is (each card the scheduler
adds re-renders it, so the stored page and the feed carry the week so far):

    ```changes
    week: 2026-W49
    ```

posting.with_card writes the block the first time a run of the week changed something.
On the page it is HTML (`changes_html`, the same markup a `> [!warning]` callout renders
to); in the letter's file on disk it is markdown, the callouts written as callouts
(`changes_markdown`). create_app registers both with the notebook.
"""

from __future__ import annotations

import re
from html import escape

import sqlalchemy as sa
from sqlalchemy.orm import Session

from app.journal import trends
from app.journal.views import card_trend, cards
from app.models import Run
from app.notebook.isoweeks import parse_week, week_span_utc
from base import statuses

WEEK_RE = re.compile(r"^[ \t]*week[ \t]*:[ \t]*(\d{4}-W\d{2})[ \t]*$", re.M)
MAX_RUNS = 200  # runs of one week looked at


def block(week: str) -> str:
    return f"```changes\nweek: {week}\n```"


def mattering(trend: trends.Trend | None, timezone: str) -> list[tuple[str, bool]]:
    """The lines of a run's changes beyond noise (every size of a sweep: a regression
    anywhere matters)."""
    if trend is None or trend.previous is None:
        return []
    beyond = {id(c) for c in trend.changes if c.beyond}
    when = card_trend.day(trend.previous, timezone)
    return [(card_trend.line_text(c, trend.previous.id, when), c.regression)
            for c in trend.changes if id(c) in beyond]


def week_changes(session: Session, week: str, timezone: str) -> list[tuple[Run, list]]:
    """Per run finished in the week (in the owner's zone), its lines that matter."""
    start, end = week_span_utc(week, timezone)
    found = []
    for run in session.scalars(
            sa.select(Run).where(Run.status == statuses.SUCCEEDED, Run.finished_at >= start,
                                 Run.finished_at < end)
            .order_by(Run.finished_at, Run.id).limit(MAX_RUNS)):
        lines = mattering(trends.trend(session, run), timezone)
        if lines:
            found.append((run, lines))
    return found


def _week(source: str) -> str | None:
    m = WEEK_RE.search(source)
    if not m:
        return None
    try:
        parse_week(m[1])
    except ValueError:
        return None
    return m[1]


def changes_html(session: Session, source: str, timezone: str = "UTC") -> str:
    week = _week(source)
    if week is None:
        return ('<div class="embed-error">a changes block needs a line '
                '"week: &lt;ISO week, e.g. 2026-W49&gt;"</div>')
    found = week_changes(session, week, timezone)
    if not found:
        return '<p class="week-changes muted">No number moved beyond its noise this week.</p>'
    parts = ['<div class="week-changes">']
    calm = []
    for run, lines in found:
        name = f"Run {run.id} · {cards.title_of(run.experiment)}"
        link = f'<a href="/runs/{run.id}">{escape(name)}</a>'
        bad = [text for text, regression in lines if regression]
        if bad:
            parts.append('<div class="callout callout-warning"><p class="callout-title">'
                         f"Regression: {link}</p><ul>"
                         + "".join(f"<li>{escape(t)}</li>" for t in bad) + "</ul></div>")
        calm += [f"<li>{link}: {escape(t)}</li>" for t, regression in lines if not regression]
    if calm:
        parts.append(f'<ul class="week-changes-calm">{"".join(calm)}</ul>')
    parts.append("</div>")
    return "".join(parts)


def changes_markdown(session: Session, source: str, timezone: str = "UTC"
                     ) -> tuple[str, dict[str, str]]:
    week = _week(source)
    found = week_changes(session, week, timezone) if week else []
    out: list[str] = []
    for run, lines in found:
        name = f"[Run {run.id} · {cards.title_of(run.experiment)}](/runs/{run.id})"
        bad = [t for t, regression in lines if regression]
        if bad:
            out += ["", f"> [!warning] Regression: {name}", *(f"> - {t}" for t in bad), ""]
        out += [f"- {name}: {t}" for t, regression in lines if not regression]
    return "\n".join(out).strip(), {}
