"""SVG charts for the result cards: horizontal bars (one or two series), stacked bars,
lines over steps, and a log-log scatter with fitted lines. Pure functions of numbers,
no script and no style attribute, so that a chart works inline under the page's strict CSP
and, stacked by `standalone`, as an image in a feed reader.

Every chart is drawn in a viewBox WIDTH units wide with FONT-unit labels: scaled to a
phone's card (about 320 px) the labels stay at least 12 px. Colours are presentation
attributes (what a standalone image shows) and classes (app.css overrides them on the
site, dark mode included: a class rule beats a presentation attribute). Every chart has a
<title>, role="img" and an aria-label; its numbers are printed on it or beside it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape

from app.journal.numbers import finite

WIDTH, FONT = 320, 12
CHAR = FONT * 0.6  # a label's width per character, roughly, for truncating
# Okabe-Ito: told apart with the common colour-vision deficiencies
PALETTE = ("#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#999999",
           "#f0e442")
TEXT, MUTED, GRID, BACKGROUND = "#1d2126", "#666c74", "#c8c4bc", "#ffffff"
Format = Callable[[float], str]


@dataclass(frozen=True)
class Chart:
    title: str  # the <title> and the aria-label
    height: float
    body: str  # SVG elements in a WIDTH × height space

    def svg(self) -> str:
        """The chart inline, sized by the stylesheet (width 100%, a max on desktop)."""
        return (f'<svg class="card-chart" viewBox="0 0 {WIDTH} {self.height:.0f}" role="img" '
                f'aria-label="{escape(self.title)}" xmlns="http://www.w3.org/2000/svg">'
                f"<title>{escape(self.title)}</title>{_background(self.height)}{self.body}"
                "</svg>")


def standalone(charts: Sequence[Chart], title: str) -> str:
    """Charts one above the other as one SVG document (presentation attributes only): the
    card as an image, for readers that drop inline SVG."""
    parts, y = [], 0.0
    for chart in charts:
        parts.append(f'<g transform="translate(0 {y:.0f})">{chart.body}</g>')
        y += chart.height + 8
    height = max(y - 8, 20.0)
    return ('<?xml version="1.0" encoding="UTF-8"?>\n'
            f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height:.0f}" '
            f'width="{WIDTH * 2}" height="{height * 2:.0f}" role="img" '
            f'aria-label="{escape(title)}" font-family="system-ui, sans-serif">'
            f"<title>{escape(title)}</title>{_background(height)}{''.join(parts)}</svg>")


def _background(height: float) -> str:
    return (f'<rect class="ch-bg" x="0" y="0" width="{WIDTH}" height="{height:.0f}" '
            f'fill="{BACKGROUND}"/>')


def text(x: float, y: float, value: str, *, anchor: str = "start", muted: bool = False,
         room: float | None = None) -> str:
    """A label, cut to the room it has (in viewBox units)."""
    if room is not None and len(value) * CHAR > room:
        keep = max(1, int(room / CHAR) - 1)
        value = value[:keep] + "…"
    cls, fill = ("ch-muted", MUTED) if muted else ("ch-text", TEXT)
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{FONT}" text-anchor="{anchor}" '
            f'class="{cls}" fill="{fill}">{escape(value)}</text>')


def _rect(x: float, y: float, w: float, h: float, series: int, outline: bool = False) -> str:
    colour = PALETTE[series % len(PALETTE)]
    if outline:
        return (f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(w, 1):.1f}" height="{h:.1f}" '
                f'class="ch-k{series % len(PALETTE)}" fill="none" stroke="{colour}" '
                'stroke-width="1.5"/>')
    return (f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(w, 1):.1f}" height="{h:.1f}" '
            f'class="ch-f{series % len(PALETTE)}" fill="{colour}"/>')


def _vline(x: float, y0: float, y1: float, dashed: bool = True) -> str:
    dash = ' stroke-dasharray="3 3"' if dashed else ""
    return (f'<line x1="{x:.1f}" y1="{y0:.1f}" x2="{x:.1f}" y2="{y1:.1f}" class="ch-axis" '
            f'stroke="{MUTED}" stroke-width="1"{dash}/>')


def legend(items: Sequence[tuple[str, int, bool]], y: float) -> tuple[str, float]:
    """Swatches and names, wrapped to the width; returns the SVG and the y below it."""
    out, x = [], 0.0
    for name, series, outline in items:
        w = 16 + len(name) * CHAR + 10
        if x and x + w > WIDTH:
            x, y = 0.0, y + FONT + 6
        out.append(_rect(x + 1, y - 9, 10, 10, series, outline))
        out.append(text(x + 16, y, name, room=WIDTH - x - 16))
        x += w
    return "".join(out), y + FONT + 6


def bars(title: str, rows: Sequence[tuple[str, Sequence[float | None]]],
         series: Sequence[tuple[str, bool]], fmt: Format, *,
         reference: tuple[float, str] | None = None) -> Chart | None:
    """Horizontal bars: per row a label line, then one bar per series (solid, or an
    outline for a prediction), its value printed at the right. `reference` draws a dashed
    line at a value (e.g. 1× for a speed-up)."""
    rows = [(label, [finite(v) for v in values]) for label, values in rows]
    rows = [(label, values) for label, values in rows if any(v is not None for v in values)]
    top = max([v for _, vs in rows for v in vs if v is not None and v > 0]
              + [reference[0] if reference else 0.0])
    if not rows or top <= 0:
        return None
    out, y = [], FONT + 2.0
    if len(series) > 1:
        part, y = legend([(name, i, outline) for i, (name, outline) in enumerate(series)], y)
        out.append(part)
    widest = max(len(fmt(v)) for _, vs in rows for v in vs if v is not None)
    span = WIDTH - widest * CHAR - 12  # the values' column at the right
    first = y
    for label, values in rows:
        out.append(text(0, y + FONT - 2, label, room=WIDTH))
        y += FONT + 3
        for i, value in enumerate(values):
            if value is not None:
                out.append(_rect(0, y, span * max(value, 0) / top, 11, i, series[i][1]))
                out.append(text(WIDTH, y + 10, fmt(value), anchor="end", muted=i > 0))
                y += 14
        y += 6
    if reference:
        x = span * reference[0] / top
        out.append(_vline(x, first, y - 4))
        out.append(text(min(x + 3, WIDTH - 40), y + FONT - 2, reference[1], muted=True))
        y += FONT + 2
    return Chart(title, y, "".join(out))


def stacked(title: str, groups: Sequence[tuple[str, Sequence[tuple[str, dict, float | None]]]],
            keys: Sequence[str], fmt: Format, marker_name: str = "") -> Chart | None:
    """Stacked horizontal bars in groups (a label line, then bars tagged e.g. M and P):
    segments coloured by key, the total printed at the right, an optional marker tick
    (e.g. the peak) across each bar."""
    def total(segments: dict) -> float:
        return sum(v for k in keys if (v := finite(segments.get(k))) and v > 0)

    tops = [max(total(s), finite(m) or 0) for _, bars_ in groups for _, s, m in bars_]
    top = max(tops, default=0.0)
    if top <= 0:
        return None
    items = [(k, i, False) for i, k in enumerate(keys)]
    out_legend, y = legend(items, FONT + 2.0)
    out = [out_legend]
    if marker_name:
        out.append(_vline(4, y - 11, y + 1, dashed=False))
        out.append(text(10, y, marker_name, muted=True))
        y += FONT + 6
    span = WIDTH - 18 - max(len(fmt(t)) for t in tops) * CHAR - 12
    for label, bars_ in groups:
        out.append(text(0, y + FONT - 2, label, room=WIDTH))
        y += FONT + 3
        for tag, segments, marker in bars_:
            out.append(text(0, y + 10, tag, muted=True))
            x = 18.0
            for i, key in enumerate(keys):
                value = finite(segments.get(key))
                if value and value > 0:
                    w = span * value / top
                    out.append(_rect(x, y, w, 11, i))
                    x += w
            if (m := finite(marker)) and m > 0:
                out.append(_vline(18 + span * m / top, y - 2, y + 13, dashed=False))
            out.append(text(WIDTH, y + 10, fmt(max(total(segments), m or 0)), anchor="end"))
            y += 15
        y += 6
    return Chart(title, y, "".join(out))


def _ticks(lo: float, hi: float) -> list[float]:
    if hi <= lo:
        return [lo]
    return [lo, (lo + hi) / 2, hi]


def lines(title: str, series: Sequence[tuple[str, Sequence[tuple[float, float]]]],
          fmt_y: Format, x_name: str) -> Chart | None:
    """Lines over a shared x (steps), one colour per series, y labelled at min, mid, max."""
    series = [(name, [(fx, fy) for x, y in pts
                      if (fx := finite(x)) is not None and (fy := finite(y)) is not None])
              for name, pts in series]
    series = [(name, pts) for name, pts in series if pts]
    if not series:
        return None
    xs = [x for _, pts in series for x, _ in pts]
    ys = [y for _, pts in series for _, y in pts]
    x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)
    if y1 == y0:
        y0, y1 = y0 - (abs(y0) or 1) * 0.05, y1 + (abs(y1) or 1) * 0.05
    left, top, plot_w, plot_h = 58.0, 8.0, WIDTH - 66.0, 96.0

    def px(x: float) -> float:
        return left + (plot_w * (x - x0) / (x1 - x0) if x1 > x0 else plot_w / 2)

    def py(y: float) -> float:
        return top + plot_h * (1 - (y - y0) / (y1 - y0))

    out = [f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" class="ch-grid" '
           f'fill="none" stroke="{GRID}"/>']
    for t in _ticks(y0, y1):
        out.append(text(left - 4, py(t) + 4, fmt_y(t), anchor="end", muted=True))
    for t in sorted({x0, x1}):
        out.append(text(px(t), top + plot_h + FONT + 2, f"{t:g}", anchor="middle", muted=True))
    out.append(text(left + plot_w / 2, top + plot_h + 2 * FONT + 4, x_name, anchor="middle",
                    muted=True))
    for i, (_, pts) in enumerate(series):
        colour, k = PALETTE[i % len(PALETTE)], i % len(PALETTE)
        path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts)
        out.append(f'<polyline points="{path}" class="ch-k{k}" fill="none" stroke="{colour}" '
                   'stroke-width="2"/>')
        out.extend(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="2.5" class="ch-f{k}" '
                   f'fill="{colour}"/>' for x, y in pts)
    y = top + plot_h + 2 * FONT + 22
    part, y = legend([(name, i, False) for i, (name, _) in enumerate(series)], y)
    out.append(part)
    return Chart(title, y, "".join(out))


def _decades(lo: float, hi: float) -> list[float]:
    a, b = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    step = 1 if b - a <= 4 else 2 if b - a <= 8 else math.ceil((b - a) / 4)
    return [10.0 ** e for e in range(a, b + 1, step)]


def loglog(title: str, points: Sequence[tuple[str, Sequence[tuple[float, float]]]],
           fitted: Sequence[tuple[int, Sequence[tuple[float, float]]]], fmt_x: Format,
           fmt_y: Format, *, x_name: str, y_name: str = "",
           marks: Sequence[tuple[float, str]] = ()) -> Chart | None:
    """A log-log scatter, one colour per series, with fitted lines (by series index,
    dashed) and vertical marks (e.g. the ridge point); `y_name` inside the plot's corner."""
    def positive(pts):  # (and below 1e300, so that a decade above stays a float)
        return [(fx, fy) for x, y in pts
                if (fx := finite(x)) and (fy := finite(y)) and 0 < fx < 1e300
                and 0 < fy < 1e300]

    points = [(name, positive(pts)) for name, pts in points]
    fitted = [(i, positive(pts)) for i, pts in fitted]
    every = [p for _, pts in points for p in pts]
    if not every:
        return None
    xs = [x for x, _ in every] + [x for _, pts in fitted for x, _ in pts] \
        + [x for x, _ in marks if (finite(x) or 0) > 0]
    ys = [y for _, pts in fitted for _, y in pts] + [y for _, y in every]
    x_lo, x_hi = math.pow(10, math.floor(math.log10(min(xs)))), max(xs)
    y_lo, y_hi = math.pow(10, math.floor(math.log10(min(ys)))), max(ys)
    x_hi = max(math.pow(10, math.ceil(math.log10(x_hi))), x_lo * 10)
    y_hi = max(math.pow(10, math.ceil(math.log10(y_hi))), y_lo * 10)
    left, top, plot_w, plot_h = 62.0, 8.0, WIDTH - 70.0, 150.0

    def px(x: float) -> float:
        return left + plot_w * (math.log10(x) - math.log10(x_lo)) / math.log10(x_hi / x_lo)

    def py(y: float) -> float:
        return top + plot_h * (1 - (math.log10(y) - math.log10(y_lo)) / math.log10(y_hi / y_lo))

    def inside(x: float, y: float) -> bool:
        return x_lo <= x <= x_hi and y_lo <= y <= y_hi

    out = [f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" class="ch-grid" '
           f'fill="none" stroke="{GRID}"/>']
    for t in _decades(y_lo, y_hi):
        out.append(text(left - 4, py(t) + 4, fmt_y(t), anchor="end", muted=True))
    ticks = _decades(x_lo, x_hi)
    for t in ticks:  # the first label starts at its tick, the last ends at the edge
        anchor = "start" if t == ticks[0] else "end" if px(t) > WIDTH - 30 else "middle"
        out.append(text(WIDTH if anchor == "end" else px(t) - (2 if anchor == "start" else 0),
                        top + plot_h + FONT + 4, fmt_x(t), anchor=anchor, muted=True))
    out.append(text(left + plot_w / 2, top + plot_h + 2 * FONT + 4, x_name, anchor="middle",
                    muted=True))
    if y_name:
        out.append(text(left + 4, top + plot_h - 6, y_name, muted=True))
    for x, label in marks:
        if finite(x) and x_lo <= x <= x_hi:
            out.append(_vline(px(x), top, top + plot_h))
            out.append(text(min(px(x) + 3, WIDTH - 60), top + FONT + 2, label, muted=True))
    for i, pts in fitted:
        pts = [(x, y) for x, y in pts if inside(x, y)]
        if len(pts) > 1:
            colour, k = PALETTE[i % len(PALETTE)], i % len(PALETTE)
            path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts)
            out.append(f'<polyline points="{path}" class="ch-k{k}" fill="none" '
                       f'stroke="{colour}" stroke-width="1.5" stroke-dasharray="4 3"/>')
    for i, (_, pts) in enumerate(points):
        colour, k = PALETTE[i % len(PALETTE)], i % len(PALETTE)
        out.extend(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" class="ch-f{k}" '
                   f'fill="{colour}"/>' for x, y in pts if inside(x, y))
    part, y = legend([(name, i, False) for i, (name, _) in enumerate(points)],
                     top + plot_h + 2 * FONT + 22)
    out.append(part)
    return Chart(title, y, "".join(out))
