"""Result cards: how a run shows inside an entry (```run blocks), on its page, and in the
Atom feed. Plain HTML, inline SVG charts (app/journal/views/charts.py) and <details> for what is
not a key number: no JavaScript, no style attributes, so the same card works under the
page's strict CSP and is stored inside entries as it is.

A card reads: the caption (run, experiment, status, when, where); what the run teaches in
two or three sentences (lessons.py, hardware_lessons.py); then its body, marked for the feed
(app.notebook.atom.feed_alternative): a reader gets the body's charts as one standalone
SVG, served at /runs/<id>/card.svg (`image`), with the lesson beside it.

Everything printed here is escaped: this HTML is inserted after sanitizing. A result is
whatever a runner sent: a card renders whatever it holds (wrong types, NaN, missing keys,
huge lists) and says what it could not draw rather than break the page.

A run with numbers says what changed since the runs that measured the same thing, one
line per headline number, a regression flagged (app/journal/views/card_trend.py).

This module also owns the ```run block itself: how one is written (`block`) and which
runs a text embeds (`embedded_runs`); create_app registers `run_card` as the notebook's
"run" embed.
"""

from __future__ import annotations

import hashlib
import logging
import re
from html import escape

from sqlalchemy.orm import Session

from app.journal import trends
from app.journal.numbers import finite, percent, ratio, seconds, si
from app.journal.trends import Trend
from app.journal.views import (
    card_own,
    card_training,
    card_trend,
    charts,
    hardware_lessons,
    lessons,
)
from app.journal.views.card_training import Body
from app.models import Run
from app.notebook import render
from app.notebook.atom import feed_alternative
from app.notebook.isoweeks import local
from base import statuses
from jobs.lab.catalogue import registry

log = logging.getLogger(__name__)

# Linear on any text: [ \t]* where \s* would let every line start rescan the newlines
# after it (quadratic on a block followed by thousands of blank lines).
RUN_ID_RE = re.compile(r"^[ \t]*id[ \t]*:[ \t]*(\d{1,12})[ \t]*$", re.M)  # inside a block
MAX_ROWS = 300


def block(run_id: int) -> str:
    """The markdown that embeds a run's card."""
    return f"```run\nid: {run_id}\n```"


def embedded_runs(text: str) -> set[int]:
    """The ids of the runs a markdown text embeds (its closed ```run blocks, found as the
    page finds them: in list items too)."""
    if "run" not in text:
        return set()
    return {int(m[1]) for block in render.fenced_blocks(text)
            if block.lang == "run" and block.closed and (m := RUN_ID_RE.search(block.code))}


def title_of(experiment: str, result: dict | None = None) -> str:
    """The lab's title; an own experiment's is the one its result carries."""
    spec = registry.EXPERIMENTS.get(experiment)
    if spec:
        return spec["title"]
    own = (result or {}).get("title") if isinstance(result, dict) else None
    return own[:120] if isinstance(own, str) and own.strip() else experiment


def run_title(run: Run) -> str:
    return title_of(run.experiment, _result(run))


def run_card(session: Session, source: str, timezone: str = "UTC") -> str:
    """The ```run embed: `id: 42` → the card of run 42, its time on the owner's clock."""
    match = RUN_ID_RE.search(source)
    if not match:
        return '<div class="embed-error">a run block needs a line "id: &lt;number&gt;"</div>'
    run = session.get(Run, int(match[1]))
    if run is None:
        return f'<div class="embed-error">there is no run {int(match[1])}</div>'
    return card(run, timezone, trends.trend(session, run))


def _result(run: Run) -> dict:
    return run.result if isinstance(run.result, dict) else {}


def _kind(result: dict) -> str:
    if isinstance(result.get("reported"), dict):  # one of the owner's own experiments
        return "own"
    if isinstance(result.get("strategies"), list):
        return "training"
    if result.get("experiment") == "collectives" or isinstance(result.get("fits"), dict):
        return "collectives"
    if isinstance(result.get("table"), list) and "peak_flops" in result:
        return "roofline"
    if "mfu" in result or "achieved_flops" in result:
        return "mfu"
    return ""


def _teach(kind: str, result: dict) -> list[str]:
    rules = {"training": lessons.training, "collectives": hardware_lessons.collectives,
             "roofline": hardware_lessons.roofline, "mfu": hardware_lessons.mfu,
             "own": lambda _result: []}  # only the owner knows what its numbers teach
    return rules[kind](result) if kind else []


def _body(kind: str, result: dict) -> Body | None:
    makers = {"training": card_training.body, "collectives": _collectives,
              "roofline": _roofline, "mfu": _mfu, "own": card_own.body}
    return makers[kind](result) if kind else None


def _picture(run: Run, made: Body | None) -> tuple[str, str] | None:
    if made is None or not made.charts:
        return None
    svg = charts.standalone(made.charts, f"Run {run.id} · {run_title(run)}")
    return svg, hashlib.sha256(svg.encode()).hexdigest()[:16]


def image(run: Run) -> tuple[str, str] | None:
    """The card's charts as one standalone SVG and its content hash (the card's image in
    the feed), or None when the run has nothing to draw."""
    result = _result(run)
    try:
        return _picture(run, _body(_kind(result), result))
    except Exception:  # as in card(): a result no rule foresaw
        log.exception("run %s: card image could not be drawn", run.id)
        return None


def card(run: Run, timezone: str = "UTC", trend: Trend | None = None) -> str:
    """The card; `trend` (trends.trend) adds what changed since the runs before."""
    status = run.status.lower()
    env = run.environment if isinstance(run.environment, dict) else {}
    ranks = (run.params or {}).get("world_size", "?")
    where = " · ".join(str(x) for x in (
        env.get("backend"), f"{ranks} rank{'' if ranks == 1 else 's'}",
        env.get("device_model") if env.get("device") == "cuda" else env.get("device"),
    ) if x)
    when = local(run.finished_at or run.started_at or run.created_at, timezone)
    parts = [
        f'<figure class="run-card run-{escape(status)}">',
        f'<figcaption><a href="/runs/{run.id}">Run {run.id} · '
        f"{escape(run_title(run))}</a> "
        f'<span class="run-status">{escape(run.status)}</span> '
        f'<span class="run-meta">{escape(when.strftime("%Y-%m-%d %H:%M %Z"))}'
        f"{' · ' + escape(where) if where else ''}</span></figcaption>",
    ]
    if run.status != statuses.SUCCEEDED:
        if run.reason:
            parts.append(f'<p class="run-reason">{escape(run.reason)}</p>')
        if run.status in statuses.UNFINISHED:
            parts.append(f"<p>step {run.progress_step} of {run.progress_total or '?'}</p>")
    result = _result(run)
    kind = _kind(result)
    try:
        taught, made = _teach(kind, result), _body(kind, result)
    except Exception:  # a result no rule foresaw: say so, and keep the page
        log.exception("run %s: card could not be drawn", run.id)
        taught, made = [], Body('<p class="run-reason">This result could not be drawn.</p>',
                                [], "")
    if taught:
        parts.append('<p class="card-lesson">' + escape(" ".join(taught)) + "</p>")
    if trend is not None:
        parts.append(card_trend.html(trend, timezone))
    if made is not None:
        picture = _picture(run, made)
        parts.append(feed_alternative(made.html, f"/runs/{run.id}/card.svg?v={picture[1]}",
                                      made.alt or " ".join(taught)[:400])
                     if picture else made.html)
    parts.append("</figure>")
    return "\n".join(parts)


def _rows(result: dict) -> list[dict]:
    table = result.get("table")
    return [r for r in table[:MAX_ROWS] if isinstance(r, dict)] if isinstance(table, list) else []


def _fitted_busbw(fit: dict, factor: float, sizes: list[float]) -> list[tuple[float, float]]:
    """busbw of the α–β line t = α + f·S/W, across the measured sizes: f·S / t."""
    alpha, bw = lessons.num(fit, "alpha_s"), lessons.num(fit, "busbw_Bps")
    if alpha is None or not bw or not sizes:
        return []
    lo, hi = min(sizes), max(sizes)
    grid = [lo * (hi / lo) ** (i / 23) for i in range(24)] if hi > lo else [lo]
    return [(s, factor * s / t) for s in grid if (t := alpha + factor * s / bw) > 0]


def _collectives(result: dict) -> Body:
    rows, fits = _rows(result), result.get("fits")
    fits = {str(op)[:40]: f for op, f in list(fits.items())[:16] if isinstance(f, dict)} \
        if isinstance(fits, dict) else {}
    factors = result.get("factors") if isinstance(result.get("factors"), dict) else {}
    ops = list(dict.fromkeys([*fits, *(str(r.get("op"))[:40] for r in rows)]))[:16]
    points = [(op, [(r.get("bytes"), r.get("busbw_Bps")) for r in rows
                    if str(r.get("op"))[:40] == op]) for op in ops]
    fitted = [(i, _fitted_busbw(fits[op], finite(factors.get(op)) or 1.0,
                                [x for x, _ in pts if (finite(x) or 0) > 0]))
              for i, (op, pts) in enumerate(points) if op in fits]
    chart = charts.loglog("Bus bandwidth against message size, per collective (points), "
                          "with the fitted α–β line (dashed)", points, fitted,
                          lambda v: si(v, "B", 2), lambda v: si(v, "B/s", 2),
                          x_name="message size")
    best = {op: max((finite(r.get("busbw_Bps")) or 0 for r in rows
                     if str(r.get("op"))[:40] == op), default=0) for op in ops}
    keys = "".join(
        f"<tr><td>{escape(op).replace('_', '_<wbr>')}</td><td class=\"num\">"
        f"{seconds(lessons.num(fits.get(op), 'alpha_s'))}"
        f"</td><td class=\"num\">{si(lessons.num(fits.get(op), 'busbw_Bps'), 'B/s', 2)}</td>"
        f"<td class=\"num\">{si(best[op] or None, 'B/s', 2)}</td>"
        f"<td class=\"num\">{percent(lessons.num(fits.get(op), 'rms_rel_error'))}</td></tr>"
        for op in ops)
    detail = "".join(
        f"<tr><td>{escape(str(r.get('op'))[:40])}</td><td class=\"num\">{si(r.get('bytes'), 'B')}"
        f"</td><td class=\"num\">{seconds(r.get('time_s'))}</td><td class=\"num\">"
        f"{si(r.get('busbw_Bps'), 'B/s')}</td><td class=\"num\">"
        f"{ratio(r.get('measured_over_predicted'))}</td></tr>" for r in rows)
    html = ('<table class="run-table card-keys"><thead><tr><th scope="col">collective</th>'
            '<th scope="col">α</th><th scope="col">W (fit)</th><th scope="col">best'
            '</th><th scope="col"><abbr title="the fit\'s rms relative error">fit err</abbr>'
            f"</th></tr></thead><tbody>{keys}</tbody></table>"
            + (f'<div class="card-charts">{chart.svg()}</div>' if chart else "")
            + ("<details><summary>Every size measured</summary>"
               '<table class="run-table"><thead><tr><th scope="col">op</th><th scope="col">'
               'bytes</th><th scope="col">time</th><th scope="col">busbw</th><th scope="col">'
               f"meas/fit</th></tr></thead><tbody>{detail}</tbody></table></details>"
               if detail else ""))
    alt = "Bus bandwidth by message size: " + "; ".join(
        f"{op} α {seconds(lessons.num(fits.get(op), 'alpha_s'))}, best {si(best[op], 'B/s')}"
        for op in ops[:6])
    return Body(html, [chart] if chart else [], alt)


def _roofline(result: dict) -> Body:
    rows = _rows(result)
    peak, bw = lessons.num(result, "peak_flops"), lessons.num(result, "copy_bandwidth_Bps")
    ridge = peak / bw if peak and bw else None
    points = [("GEMMs", [(r.get("intensity_flop_per_byte"), r.get("flops_per_s"))
                         for r in rows])]
    xs = [x for r in rows if (x := lessons.num(r, "intensity_flop_per_byte")) and x > 0]
    roof = []
    if ridge and xs:
        lo, hi = min(min(xs), ridge) / 2, max(max(xs), ridge) * 2
        roof = [(lo, lo * bw), (ridge, peak), (hi, peak)]
    chart = charts.loglog("Roofline: each GEMM's FLOP/s against its arithmetic intensity, "
                          "under the memory slope and the compute peak (dashed)", points,
                          [(1, roof)], lambda v: f"{v:g}", lambda v: si(v, "", 2),
                          x_name="FLOP per byte", y_name="FLOP/s",
                          marks=[(ridge, f"ridge {ridge:.3g}")] if ridge else [])
    shape = lambda r: "×<wbr>".join(escape(str(r.get(k))[:8]) for k in "MNK")  # noqa: E731
    table = "".join(
        f"<tr><td>{shape(r)}</td><td class=\"num\">{si(r.get('flops_per_s'))}</td>"
        f"<td class=\"num\">{si(r.get('intensity_flop_per_byte'))}</td>"
        f"<td class=\"num\">{percent(r.get('fraction_of_bound'))}</td>"
        f"<td>{escape(str(r.get('bound_by', '–'))[:20])}</td></tr>" for r in rows)
    html = (f'<p class="card-keyline">peak {si(peak, "FLOP/s")} · copy bandwidth '
            f'{si(bw, "B/s")} · ridge {si(ridge)} FLOP/B</p>'
            + (f'<div class="card-charts">{chart.svg()}</div>' if chart else "")
            + '<table class="run-table card-keys"><thead><tr><th scope="col">M×N×K</th>'
            '<th scope="col">FLOP/s</th><th scope="col">FLOP/B</th><th scope="col">of roof'
            f'</th><th scope="col">bound</th></tr></thead><tbody>{table}</tbody></table>')
    alt = (f"Roofline: peak {si(peak, 'FLOP/s')}, copy {si(bw, 'B/s')}, ridge {si(ridge)} "
           "FLOP/B; " + "; ".join(f"{'×'.join(str(r.get(k))[:8] for k in 'MNK')} "
                                  f"{si(r.get('flops_per_s'), 'FLOP/s')}" for r in rows[:8]))
    return Body(html, [chart] if chart else [], alt)


def _mfu(result: dict) -> Body:
    achieved, peak = lessons.num(result, "achieved_flops"), lessons.num(result, "peak_flops")
    name = str(result.get("peak_name") or result.get("peak_source") or "peak")[:80]
    chart = charts.bars(f"Achieved FLOP/s against the peak ({name})",
                        [("achieved", [achieved, None]), (f"peak: {name}", [None, peak])],
                        [("achieved", False), ("peak", True)], lambda v: si(v, "FLOP/s"))
    facts = [("MFU", percent(lessons.num(result, "mfu"))),
             ("tokens/s", si(lessons.num(result, "tokens_per_s"))),
             ("step time", seconds(lessons.num(result, "step_time_s", "median"))),
             ("achieved", si(achieved, "FLOP/s")), ("peak", f"{si(peak, 'FLOP/s')} "
                                                             f"<small>{escape(name)}</small>")]
    html = ((f'<div class="card-charts">{chart.svg()}</div>' if chart else "")
            + '<dl class="card-facts">'
            + "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in facts) + "</dl>")
    alt = (f"MFU {percent(lessons.num(result, 'mfu'))}: {si(achieved, 'FLOP/s')} achieved of "
           f"{si(peak, 'FLOP/s')} ({name})")
    return Body(html, [chart] if chart else [], alt)
