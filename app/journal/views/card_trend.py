"""What changed since the runs before, as the card says it (app/journal/trends.py judges):
one line per headline number, naming and linking the run it is compared with, a
regression flagged; and the same lines as text, for the letter's opening and the webhook.

    all_reduce at 268 MB: 41.2 GB/s, −17% vs Sun 29 Nov (#41), beyond its ±3% noise

A collective sweep has a number per operation and message size: the card names each
operation's largest size (the bandwidth-bound one) and any other size that regressed; the
trend page draws them all.
"""

from __future__ import annotations

from html import escape

from app.journal import trends
from app.journal.trends import Change, Trend
from app.notebook.isoweeks import iso_week, local


def trend_url(trend: Trend) -> str:
    return f"/trends/{trend.run.param_key}"


def shown_changes(trend: Trend) -> list[Change]:
    """The changes a card names (module docstring)."""
    return shown(trend.changes)


def shown(changes: list[Change]) -> list[Change]:
    """Of these changes, those a card names (module docstring)."""
    largest: dict[str, Change] = {}
    for c in changes:
        op, _, size = c.now.key.partition(".busbw_Bps@")
        if size and (op not in largest or int(size) > int(
                largest[op].now.key.rpartition("@")[2])):
            largest[op] = c
    keep = {id(c) for c in largest.values()}
    return [c for c in changes if "@" not in c.now.key or id(c) in keep or c.regression]


def week_of(run, timezone: str) -> str:
    return iso_week(local(trends.when(run), timezone).date())


def day(run, timezone: str) -> str:
    return local(trends.when(run), timezone).strftime("%a %d %b")


def line_text(c: Change, previous_id: int, day: str) -> str:
    """One change as text (no markup)."""
    head = f"{c.now.label}: {c.now.shown()}"
    if c.before is None:
        return f"{head}, not measured by #{previous_id}"
    if c.change is None:  # a runner's absurd numbers: no ratio of them is a number
        return f"{head}, not comparable with #{previous_id}"
    text = f"{head}, {trends.signed(c.change)} vs {day} (#{previous_id}), {trends.judged(c)}"
    if c.baseline_runs > 1 and c.baseline_change is not None:
        text += f"; {trends.signed(c.baseline_change)} vs the median of {c.baseline_runs} runs"
    if not c.now.direction:
        text += "; no better direction declared: never judged a regression"
    return text


def lines(trend: Trend, timezone: str = "UTC", every: bool = False) -> list[tuple[str, bool]]:
    """(text, is it a regression) per change the card names (every change if asked)."""
    if trend.previous is None:
        return []
    when = day(trend.previous, timezone)
    chosen = trend.changes if every else shown_changes(trend)
    return [(line_text(c, trend.previous.id, when), c.regression) for c in chosen]


def html(trend: Trend | None, timezone: str = "UTC") -> str:
    """The card's trend section; "" for a run with no numbers, or the first of its
    parameters (unless a schedule made it: a schedule's card always says where it stands)."""
    if trend is None or (trend.previous is None and trend.edited_from is None
                         and trend.run.schedule_id is None):
        return ""  # a lone run: nothing to compare, and no series to draw yet
    link = f'<a href="{escape(trend_url(trend))}">the trend of these parameters</a>'
    parts = ['<section class="card-trend">']
    if trend.edited_from is not None:
        names = ", ".join(trend.edited)[:200] or "parameters"
        parts.append(f'<p class="card-trend-note">Parameters changed since '
                     f'<a href="/runs/{trend.edited_from.id}">#{trend.edited_from.id}</a> '
                     f"({escape(names)}): not compared with it.</p>")
    if trend.previous is None:
        parts.append(f'<p class="card-trend-note">The first successful run of these '
                     f"parameters: nothing to compare yet ({link}).</p>")
        return "\n".join([*parts, "</section>"])
    previous = trend.previous
    count = len(trend.regressions)
    flag = (f'<p class="trend-flag"><strong>{count} regression{"s" if count > 1 else ""}'
            f"</strong> beyond noise since #{previous.id}.</p>" if count else "")
    items = "".join(
        f'<li class="{"trend-regression" if bad else "trend-change"}">'
        + ("<strong>Regression:</strong> " if bad else "")
        + _linked(escape(text), previous.id) + "</li>"
        for text, bad in lines(trend, timezone))
    parts += [flag, f'<p class="card-trend-head">Since <a href="/runs/{previous.id}">run '
                    f"{previous.id}</a> ({link}):</p>", f"<ul>{items}</ul>"]
    week = week_of(trend.run, timezone)
    if week_of(previous, timezone) == week:  # a repeat: the week is summed up elsewhere
        parts.append(f'<p class="card-trend-note">Run again within {week}: <a href="/weeks/'
                     f"{week}\">its letter</a> sums up the week's runs against the weeks "
                     "before.</p>")
    parts.append("</section>")
    return "\n".join(p for p in parts if p)


def _linked(text: str, run_id: int) -> str:
    """The line with its "(#41)" linking the run."""
    return text.replace(f"(#{run_id})", f'(<a href="/runs/{run_id}">#{run_id}</a>)', 1)
