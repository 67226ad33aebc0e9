"""The trend page's charts: one headline number over a series of runs (app/journal/trends.py),
each run a point with its measured p10–p90 band as a whisker, a link to the run, and a
dashed line where the runs' environment changed (torch, CUDA, driver, device, host) or,
on a schedule's page, where an edit changed its parameters.

Runs are spaced evenly in their order, not by date: a schedule that skipped a week still
reads as its sequence of measurements, and the dates are printed under the first and last.
As charts.py: SVG without script or style attribute, under the page's strict CSP.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from html import escape

from app.journal import trends
from app.journal.trends import Number
from app.journal.views import card_trend
from app.journal.views.charts import FONT, GRID, MUTED, PALETTE, WIDTH, Chart, text
from app.models import Run
from app.notebook.isoweeks import local

MAX_CHARTS = 24


@dataclass(frozen=True)
class Point:
    run: Run
    number: Number


@dataclass(frozen=True)
class Series:
    key: str
    label: str
    points: list[Point]


def collect(runs: Sequence[Run]) -> list[Series]:
    """Per headline number the runs that measured it, in the runs' order. A collective
    sweep's sizes: each operation's largest first (the card's choice), then the rest."""
    table = [(run, trends.headlines(run.result)) for run in runs]
    keys: dict[str, str] = {}
    for _, numbers in table:
        for key, number in numbers.items():
            keys.setdefault(key, number.label)

    def order(key: str) -> tuple:
        op, _, size = key.partition(".busbw_Bps@")
        return (1, -int(size), op) if size else (0, 0, "")

    chosen = sorted(keys, key=order)[:MAX_CHARTS]
    return [Series(key, keys[key], [Point(run, numbers[key]) for run, numbers in table
                                    if key in numbers]) for key in chosen]


def environment_marks(runs: Sequence[Run]) -> list[tuple[int, list[str]]]:
    """(index of the first run after a change, what changed) along the series: the
    environment, and on a schedule's page its parameters, where an edit changed them."""
    return [(i, changed) for i in range(1, len(runs))
            if (changed := trends.environment_changes(runs[i - 1], runs[i])
                + _parameter_changes(runs[i - 1], runs[i]))]


def _parameter_changes(before: Run, after: Run) -> list[str]:
    if before.param_key == after.param_key:
        return []
    a, b = before.params or {}, after.params or {}
    return [f"{k} {str(a.get(k, '–'))[:40]} → {str(b.get(k, '–'))[:40]}"
            for k in sorted({*a, *b}) if a.get(k) != b.get(k)][:8]


def chart(series: Series, marks: dict[int, list[str]], timezone: str = "UTC") -> Chart | None:
    """One number over the runs (marks: run id → the environment changes it follows)."""
    points = series.points
    if not points:
        return None
    values = [v for p in points for v in (p.number.value, p.number.low, p.number.high)
              if v is not None]
    y0, y1 = min(values), max(values)
    pad = (y1 - y0) * 0.1 or abs(y1) * 0.05 or 1.0
    y0, y1 = max(0.0, y0 - pad) if y0 >= 0 else y0 - pad, y1 + pad
    left, top, plot_w, plot_h = 76.0, 8.0, WIDTH - 84.0, 110.0  # room for "43.1 GB/s"

    def px(i: int) -> float:
        return left + 6 + ((plot_w - 12) * i / (len(points) - 1) if len(points) > 1
                           else (plot_w - 12) / 2)

    def py(y: float) -> float:
        return top + plot_h * (1 - (y - y0) / (y1 - y0))

    shown = points[0].number
    out = [f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" class="ch-grid" '
           f'fill="none" stroke="{GRID}"/>']
    for t in (y0, (y0 + y1) / 2, y1):
        label = replace(shown, value=t, low=None, high=None).shown()
        out.append(text(left - 4, py(t) + 4, label, anchor="end", muted=True))
    for i, p in enumerate(points):
        for change in marks.get(p.run.id, []) if i else []:
            x = (px(i - 1) + px(i)) / 2
            out.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{top + plot_h}" '
                       f'class="ch-axis trend-env" stroke="{MUTED}" stroke-dasharray="3 3">'
                       f"<title>{escape(change)}</title></line>")
    colour = PALETTE[0]
    path = " ".join(f"{px(i):.1f},{py(p.number.value):.1f}" for i, p in enumerate(points))
    out.append(f'<polyline points="{path}" class="ch-k0" fill="none" stroke="{colour}" '
               'stroke-width="1.5"/>')
    for i, p in enumerate(points):
        n = p.number
        if n.low is not None and n.high is not None:
            out.append(f'<line x1="{px(i):.1f}" y1="{py(n.high):.1f}" x2="{px(i):.1f}" '
                       f'y2="{py(n.low):.1f}" class="ch-k0" stroke="{colour}" '
                       'stroke-width="1"/>')
        when = local(trends.when(p.run), timezone).strftime("%Y-%m-%d")
        spread = f" ±{n.spread:.0%}" if n.spread is not None else ""
        out.append(f'<a href="/runs/{p.run.id}" class="trend-point"><circle cx="{px(i):.1f}" '
                   f'cy="{py(n.value):.1f}" r="4" class="ch-f0" fill="{colour}"><title>'
                   f"Run {p.run.id}, {when}: {escape(n.shown())}{spread}</title></circle></a>")
    first, last = points[0].run, points[-1].run
    day = lambda r: local(trends.when(r), timezone).strftime("%d %b")  # noqa: E731
    out.append(text(px(0), top + plot_h + FONT + 2, f"#{first.id} {day(first)}",
                    anchor="start" if len(points) > 1 else "middle", muted=True))
    if len(points) > 1:
        out.append(text(px(len(points) - 1), top + plot_h + FONT + 2,
                        f"#{last.id} {day(last)}", anchor="end", muted=True))
    title = (f"{series.label} over {len(points)} run{'s' if len(points) > 1 else ''}, "
             "each with its measured p10–p90; dashed: the environment changed")
    return Chart(title, top + plot_h + FONT + 8, "".join(out))


def latest_lines(runs: Sequence[Run], session, timezone: str) -> list[tuple[str, bool]]:
    """What the latest run's card says changed, for the page's opening."""
    if not runs:
        return []
    found = trends.trend(session, runs[-1])
    return card_trend.lines(found, timezone) if found else []
