"""The card of one of the owner's own experiments (jobs/lab/catalogue/own.py declares it,
jobs/lab/experiments/own.py reports it): a generic card, since only the owner knows what
the numbers mean. The scalars as the key table (the letter's file takes it from there,
card_markdown.py), each series as a line chart over steps, each table as it was reported,
and the environment the run recorded. Every name, unit and description comes from the
declaration the result carries; whatever a runner sent is escaped and bounded here.
"""

from __future__ import annotations

from html import escape

from app.journal.numbers import finite, seconds, si
from app.journal.views import charts
from app.journal.views.card_training import Body

MAX_NAMES = 40
MAX_ROWS = 300
MAX_POINTS = 2000  # drawn per series (evenly thinned beyond)


def _dict(value) -> dict:
    return value if isinstance(value, dict) else {}


def declared(result: dict, kind: str, name: str) -> dict:
    """What the declaration says of a reported name: description, unit, better."""
    return _dict(_dict(_dict(result.get("reports")).get(kind)).get(name))


def number(value, unit: str = "") -> str:
    """A reported number with its declared unit: seconds as 4.5 ms, counts whole."""
    if isinstance(value, int) and not isinstance(value, bool) and not unit:
        return f"{value:,}"
    if unit == "s":
        return seconds(value)
    if finite(value) is not None and 1e-3 <= abs(value) < 1e3 and not unit:
        return f"{value:.4g}"
    return si(value, unit)


def scalars(result: dict) -> list[tuple[str, object, dict]]:
    """(name, value, declaration) of every reported scalar, in the declared order first."""
    got = _dict(_dict(result.get("reported")).get("scalars"))
    order = list(_dict(_dict(result.get("reports")).get("scalars"))) + list(got)
    return [(str(n)[:40], got[n], declared(result, "scalars", n))
            for n in list(dict.fromkeys(order))[:MAX_NAMES] if n in got]


def _points(raw) -> list[tuple[float, float]]:
    pts = [(p[0], p[1]) for p in raw if isinstance(p, list) and len(p) == 2] \
        if isinstance(raw, list) else []
    step = max(1, len(pts) // MAX_POINTS)
    return pts[::step]


def _charts(result: dict) -> list[charts.Chart]:
    made = []
    for name, raw in list(_dict(_dict(result.get("reported")).get("series")).items())[:12]:
        about = declared(result, "series", name)
        unit = str(about.get("unit") or "")[:20]
        title = f"{name}" + (f": {about['description']}" if about.get("description") else "")
        chart = charts.lines(title[:200], [(str(name)[:40], _points(raw))],
                             lambda v, u=unit: seconds(v) if u == "s" else si(v, u),
                             x_name="step")
        if chart is not None:
            made.append(chart)
    return made


def _cell(value) -> str:
    return escape(value[:200]) if isinstance(value, str) else number(value)


def _tables(result: dict) -> str:
    out = []
    for name, table in list(_dict(_dict(result.get("reported")).get("tables")).items())[:8]:
        table = _dict(table)
        columns = [str(c)[:60] for c in table.get("columns") or []][:20] \
            if isinstance(table.get("columns"), list) else []
        rows = [r for r in table.get("rows") or [] if isinstance(r, list)][:MAX_ROWS] \
            if isinstance(table.get("rows"), list) else []
        about = declared(result, "tables", name).get("description") or ""
        head = "".join(f'<th scope="col">{escape(c)}</th>' for c in columns)
        body = "".join("<tr>" + "".join(
            ("<td>" if isinstance(v, str) else '<td class="num">') + f"{_cell(v)}</td>"
            for v in row[:len(columns)]) + "</tr>" for row in rows)
        out.append(f'<table class="run-table"><caption>{escape(str(name)[:40])}'
                   f'{" · " + escape(str(about)[:300]) if about else ""}</caption>'
                   f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
    return "".join(out)


def _environment(result: dict) -> str:
    env = _dict(result.get("environment"))
    if not env:
        return ""
    items = "".join(f"<dt>{escape(str(k)[:40])}</dt><dd>{escape(str(v)[:200])}</dd>"
                    for k, v in list(env.items())[:40])
    return f'<details><summary>Environment</summary><dl class="card-facts">{items}</dl></details>'


def body(result: dict) -> Body:
    keys = "".join(
        f"<tr><td>{escape(name)}</td><td class=\"num\">"
        f"{number(value, str(about.get('unit') or '')[:20])}</td>"
        f"<td>{escape(str(about.get('description') or '')[:300])}</td></tr>"
        for name, value, about in scalars(result))
    drawn = _charts(result)
    # trends judge a scalar by its declared direction: say which ones they never flag
    unjudged = [name for name, _, about in scalars(result)
                if about.get("better") not in ("higher", "lower")]
    note = (f'<p class="muted">{escape(", ".join(unjudged))}: no better direction declared, '
            "so trends draw {} but never judge a regression.</p>".format(
                "it" if len(unjudged) == 1 else "them") if unjudged and keys else "")
    html = ((f'<table class="run-table card-keys"><thead><tr><th scope="col">reported</th>'
             f'<th scope="col">value</th><th scope="col">what</th></tr></thead>'
             f"<tbody>{keys}</tbody></table>{note}" if keys else "")
            + (f'<div class="card-charts">{"".join(c.svg() for c in drawn)}</div>'
               if drawn else "")
            + _tables(result) + _environment(result))
    alt = "; ".join(f"{name} {number(value, str(about.get('unit') or ''))}"
                    for name, value, about in scalars(result)[:8])
    return Body(html or '<p class="muted">This run reported nothing.</p>', drawn, alt)
