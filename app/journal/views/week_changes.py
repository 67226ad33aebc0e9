"""The changes that matter this week: what opens a letter's Experiments section. One group
per experiment and parameters (a comparison key) that ran in the week, summed up against
the runs before the week (app/journal/week_trends.py): the latest run's numbers that moved
beyond noise, the week's range, a regression named once with the run where it appeared,
and the week's runs linked rather than repeated.

    Collective bandwidth sweep: 3 runs this week (#12, #13, #16), against the median of
    4 runs before it
    - all_reduce at 65.5 kB: 30 GB/s in #16, −25% from 40 GB/s, beyond its ±4% noise;
      this week 29.8–30.4 GB/s; a regression since #12

The first week of a group's parameters has nothing before it, and a run of the same week
is no reference: the group says so, with the week's range of each number the card names.

It is a fenced block in the letter, rendered when the letter is (each card the scheduler
adds re-renders it, so the stored page and the feed carry the week so far):

    ```changes
    week: 2026-W49
    ```

posting.with_card writes the block the first time a run of the week changed something.
On the page it is HTML (`changes_html`, a regressed group in the same markup a
`> [!warning]` callout renders to); in the letter's file on disk it is markdown, the
callouts written as callouts (`changes_markdown`). create_app registers both with the
notebook. The trend page shows its key's group for the week of its latest run.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from html import escape

from sqlalchemy.orm import Session

from app.journal import trends, week_trends
from app.journal.views import card_markdown, card_trend, cards
from app.journal.week_trends import WeekGroup, WeekNumber
from app.models import Run
from app.notebook.isoweeks import parse_week, week_span_utc

WEEK_RE = re.compile(r"^[ \t]*week[ \t]*:[ \t]*(\d{4}-W\d{2})[ \t]*$", re.M)
LINKED_RUNS = 6  # a group links this many of its runs, the first and the last ones


def block(week: str) -> str:
    return f"```changes\nweek: {week}\n```"


def week_groups(session: Session, week: str, timezone: str) -> list[WeekGroup]:
    """The week's groups (in the owner's zone) that have something to say."""
    return [g for g in week_trends.groups(session, *week_span_utc(week, timezone))
            if g.mattering]


def group_of(session: Session, run: Run, timezone: str) -> WeekGroup | None:
    """The group of the run's parameters in the week it finished in."""
    week = card_trend.week_of(run, timezone)
    return week_trends.group_of(session, run, *week_span_utc(week, timezone))


def moves_the_week(session: Session, run: Run, timezone: str) -> bool:
    """Whether the week's block says something of the run's parameters (posting)."""
    group = group_of(session, run, timezone)
    return group is not None and bool(group.mattering)


# -- in words -----------------------------------------------------------------------------


def shown_runs(group: WeekGroup) -> list[Run | None]:
    """The runs a group links: all of a few, else the first and the last ones (None
    where the rest are left out: the trend page lists them)."""
    runs = group.runs
    if len(runs) <= LINKED_RUNS:
        return list(runs)
    half = LINKED_RUNS // 2
    return [*runs[:half], None, *runs[-half:]]


def head_parts(group: WeekGroup, timezone: str) -> tuple[str, str]:
    """The group's runs, and what they are measured against (runs named "#N", which the
    HTML and the markdown make links)."""
    count = len(group.runs)
    named = ", ".join("…" if r is None else f"#{r.id}" for r in shown_runs(group))
    if group.first:
        runs = f"run #{group.latest.id}" if count == 1 else f"{count} runs ({named})"
        return f"the first week of these parameters, {runs}", "nothing before to compare with"
    runs = f"run #{group.latest.id}" if count == 1 else f"{count} runs this week ({named})"
    if len(group.before) == 1:
        only = group.before[0]
        return runs, f"against {card_trend.day(only, timezone)} (#{only.id}), the run before"
    return runs, f"against the median of {len(group.before)} runs before this week"


def number_text(group: WeekGroup, n: WeekNumber) -> str:
    """One number of the group as text (no markup)."""
    c = n.change
    if group.first:
        now = f"{c.now.shown()} in #{group.latest.id}"
        if n.count < 2:
            return f"{c.now.label}: {now} alone"
        spread = _range(n)
        return (f"{c.now.label}: {spread} over {n.count} runs, {now}" if spread
                else f"{c.now.label}: {c.now.shown()} in each of {n.count} runs")
    head = f"{c.now.label}: {c.now.shown()}"
    if len(group.runs) > 1:
        head += f" in #{group.latest.id}"
    if c.change is None or c.before is None:  # a runner's absurd numbers
        return f"{head}, not comparable with the runs before"
    text = f"{head}, {trends.signed(c.change)} from {c.before.shown()}, {trends.judged(c)}"
    if _range(n):
        text += f"; this week {_range(n)}"
    if n.regression and n.first_bad is not None and n.first_bad.id != group.latest.id:
        text += f"; a regression since #{n.first_bad.id}"
    elif n.recovered and n.first_bad_number is not None:
        text += (f"; #{n.first_bad.id} was a regression ({n.first_bad_number.shown()}), "
                 "recovered since")
    if not c.now.direction:
        text += "; no better direction declared: never judged a regression"
    return text


def _range(n: WeekNumber) -> str:
    """The week's range, "low to high" ("" for one value)."""
    if n.count < 2 or n.high <= n.low:
        return ""
    low, high = (replace(n.change.now, value=v, low=None, high=None).shown()
                 for v in (n.low, n.high))
    return f"{low} to {high}"


def lines(group: WeekGroup) -> list[tuple[str, bool]]:
    """(text, is it a regression) per number that matters, regressions first; of a first
    week's ranges, those a card would name."""
    chosen = sorted(group.mattering, key=lambda n: not n.regression)
    if group.first:
        named = {id(c) for c in card_trend.shown([n.change for n in chosen])}
        chosen = [n for n in chosen if id(n.change) in named]
    return [(number_text(group, n), n.regression) for n in chosen]


# -- the block ----------------------------------------------------------------------------


def _week(source: str) -> str | None:
    m = WEEK_RE.search(source)
    if not m:
        return None
    try:
        parse_week(m[1])
    except ValueError:
        return None
    return m[1]


def _linked(text: str, group: WeekGroup, link) -> str:
    """Escaped text with each "#N" of the group's runs a link (`link(run_id, label)`)."""
    ids = {r.id for r in [*group.runs, *group.before]}
    return re.sub(r"#(\d+)\b", lambda m: link(int(m[1]), m[0]) if int(m[1]) in ids else m[0],
                  text)


def group_html(group: WeekGroup, timezone: str) -> str:
    """A group as HTML: a regressed one in a warning callout, the others a list item."""
    def link(run_id: int, label: str) -> str:
        return f'<a href="/runs/{run_id}">{label}</a>'

    title = (f'<a href="/trends/{escape(group.key)}">'
             f"{escape(cards.title_of(group.latest.experiment))}</a>")
    runs, reference = head_parts(group, timezone)
    head = f"{title}: {_linked(escape(runs), group, link)}, " \
           f"{_linked(escape(reference), group, link)}"
    found = lines(group)
    items = "".join(f"<li>{'<strong>Regression:</strong> ' if bad else ''}"
                    f"{_linked(escape(text), group, link)}</li>" for text, bad in found)
    if any(bad for _, bad in found):
        return ('<div class="callout callout-warning week-change">'
                f'<p class="callout-title">Regression: {head}</p><ul>{items}</ul></div>')
    return f'<li class="week-change">{head}<ul>{items}</ul></li>'


def changes_html(session: Session, source: str, timezone: str = "UTC") -> str:
    week = _week(source)
    if week is None:
        return ('<div class="embed-error">a changes block needs a line '
                '"week: &lt;ISO week, e.g. 2026-W49&gt;"</div>')
    return groups_html(week_groups(session, week, timezone), timezone)


def groups_html(found: list[WeekGroup], timezone: str) -> str:
    """The block's HTML for these groups: regressed ones first, as callouts."""
    if not found:
        return '<p class="week-changes muted">No number moved beyond its noise this week.</p>'
    bad = [g for g in found if g.regressions]
    calm = [g for g in found if not g.regressions]
    parts = ['<div class="week-changes">', *(group_html(g, timezone) for g in bad)]
    if calm:
        parts.append('<ul class="week-changes-calm">'
                     + "".join(group_html(g, timezone) for g in calm) + "</ul>")
    parts.append("</div>")
    return "".join(parts)


def group_markdown(group: WeekGroup, timezone: str,
                   link: Callable[[str], str | None] = lambda anchor: None) -> list[str]:
    """A group in a file: its runs' "#N" linked to their cards in the folder (where
    `link` knows them; card_markdown), never to the app's pages."""
    ids = {r.id for r in [*group.runs, *group.before]}

    def linked(text: str) -> str:
        return card_markdown.linked_runs(text, link, ids)

    runs, reference = head_parts(group, timezone)
    head = (f"{cards.title_of(group.latest.experiment)}: "
            f"{linked(runs)}, {linked(reference)}")
    found = lines(group)
    if any(bad for _, bad in found):
        return ["", f"> [!warning] Regression: {head}",
                *(f"> - {'**Regression:** ' if bad else ''}{linked(t)}"
                  for t, bad in found), ""]
    return [f"- {head}", *(f"    - {linked(t)}" for t, _ in found)]


def changes_markdown(session: Session, source: str, timezone: str = "UTC",
                     link: Callable[[str], str | None] = lambda anchor: None
                     ) -> tuple[str, dict[str, str]]:
    week = _week(source)
    found = week_groups(session, week, timezone) if week else []
    out: list[str] = []
    for group in sorted(found, key=lambda g: not g.regressions):
        out += group_markdown(group, timezone, link)
    return "\n".join(out).strip(), {}
