"""The run page's measured views, from the run's events.jsonl: where each rank's time
went in one step (app/journal/views/timeline.py, drawn by timeline_chart.py), the traffic
between ranks (traffic.py), and the link to the Chrome trace.

templates/experiments/_run_views.html calls `rank_views(run)`; it renders nothing when
the run has no events. The strategy and the step come from the query string
(?tl_strategy=gpipe&tl_step=2): plain links, so picking works without JavaScript. A name
or step the run does not have falls back to the default (the first strategy every rank
computes in, its median timed step) and says so, rather than failing the whole page.
"""

from __future__ import annotations

import json

from flask import current_app, request, url_for
from markupsafe import Markup

from app.db import get_session
from app.journal.numbers import si
from app.journal.views import rank_events, timeline, timeline_chart, traffic
from app.models import Run
from app.web.pages.blueprints import experiments as bp


def _result_entry(run: Run, strategy: str) -> dict:
    for entry in (run.result or {}).get("strategies") or []:
        if isinstance(entry, dict) and entry.get("strategy") == strategy:
            return entry
    return {}


def _everyone_computes(strategies: list[str], found: rank_events.RunEvents) -> str:
    """The first strategy in which every rank of the run computes: a run's single-device
    reference leaves the other ranks idle the whole step, which is not what the view is
    for (the first strategy when none does)."""
    ranks = set(found.ranks())
    for strategy in strategies:
        working = {e.rank for e in found.events
                   if e.strategy == strategy and e.kind in ("forward", "backward")}
        if len(ranks) > 1 and working >= ranks:
            return strategy
    return strategies[0]


def _pick(strategies: list[str], found: rank_events.RunEvents) -> tuple[str, int, str]:
    """(strategy, step, a note when the query asked for something the run lacks)."""
    note = ""
    asked = request.args.get("tl_strategy")
    strategy = asked if asked in strategies else _everyone_computes(strategies, found)
    if asked is not None and asked != strategy:
        note = f"This run has no strategy {asked[:64]!r}; showing {strategy}."
    steps = found.timed_steps(strategy)
    step = timeline.median_step(found, strategy)
    asked_step = request.args.get("tl_step")
    if asked_step is not None:
        try:
            wanted = int(asked_step) if len(asked_step) < 12 else None
        except ValueError:
            wanted = None
        if wanted in steps:
            step = wanted
        else:
            note = note or f"{strategy} has no timed step {asked_step[:12]!r}; showing step {step}."
    return strategy, step, note


def _link(run: Run, strategy: str, step: int | None = None) -> str:
    args = {"tl_strategy": strategy} if step is None else {"tl_strategy": strategy,
                                                           "tl_step": step}
    return url_for("experiments.run_page", run_id=run.id, **args) + "#timeline"


def _idle_table(view: timeline.StepView) -> dict:
    labels = sorted({label for r in view.ranks for label in r.idle_by},
                    key=lambda s: (s != "warm-up", s == "other", s))
    rows = []
    for lane in view.ranks:
        span = lane.span_s or 1e-12
        by = lane.idle_by
        rows.append({"rank": lane.rank, "span": timeline_chart.ms(lane.span_s),
                     "busy": f"{timeline_chart.ms(lane.busy_s)} ({lane.busy_s / span:.0%})",
                     "idle": [f"{timeline_chart.ms(by[k])} ({by[k] / span:.0%})" if k in by
                              else "–" for k in labels]})
    return {"labels": labels, "rows": rows}


def _bubble(run: Run, found, view: timeline.StepView, strategy: str) -> dict | None:
    if view.ideal is None:
        return None
    measured, per_rank = timeline.measured_bubble(found, strategy)
    recorded = _result_entry(run, strategy).get("bubble") or {}
    ideal = view.ideal
    return {"step": view.bubble, "per_rank": [r.bubble for r in view.ranks],
            "formula": ideal.formula, "p": ideal.p, "m": ideal.m, "order": ideal.name,
            "ideal_span": timeline_chart.ms(ideal.span), "t_f": timeline_chart.ms(ideal.t_f),
            "t_b": timeline_chart.ms(ideal.t_b), "span": timeline_chart.ms(view.duration),
            "measured": measured, "measured_per_rank": per_rank,
            "recorded": recorded.get("measured_idle_fraction"),
            "predicted": recorded.get("predicted")}


def _not_logged(run: Run, strategy: str) -> str:
    """What the lab counted for a strategy whose collectives it did not log."""
    comm = _result_entry(run, strategy).get("comm") or {}
    per_rank = comm.get("per_rank") or []
    first = per_rank[0].get("per_step") if per_rank and isinstance(per_rank[0], dict) else None
    if comm.get("instrumented") is not False or not isinstance(first, dict):
        return ""
    counted = ", ".join(f"{kind} {si(v.get('bytes'), 'B')}" for kind, v in sorted(first.items())
                        if isinstance(v, dict) and kind != "recv")
    return (f"PyTorch issues this strategy's communication itself, so no per-peer events "
            f"were logged; the lab's census counted, per step on rank 0: {counted}.")


def _heatmaps(run: Run, found) -> list[dict]:
    out = []
    for strategy in found.strategies:
        if not found.timed_steps(strategy):
            continue
        t = traffic.matrix(found, strategy)
        out.append({"strategy": strategy, "empty": not t.cells,
                    "svg": Markup(traffic.heatmap_svg(t)) if t.cells else None,
                    "caption": traffic.caption(t), "not_logged": _not_logged(run, strategy)})
    return out


@bp.app_template_global("rank_views")
def rank_views(run: Run) -> dict | None:
    """Everything _run_views.html shows, or None when the run logged no timed events."""
    found = rank_events.run_events(current_app.config["DATA_DIR"], get_session(), run.id)
    if found is None:
        return None
    key = ("rank_views", run.id, run.status, json.dumps(run.params, sort_keys=True,
                                                        default=str),
           json.dumps(run.result, sort_keys=True, default=str),
           request.args.get("tl_strategy"), request.args.get("tl_step"))
    return found.derived(key, lambda: _rank_views(run, found))


def _rank_views(run: Run, found: rank_events.RunEvents) -> dict | None:
    strategies = [s for s in found.strategies if found.timed_steps(s)]
    if not strategies:
        return None
    strategy, step, note = _pick(strategies, found)
    view = timeline.step_view(found, strategy, step)
    median = timeline.median_step(found, strategy)
    steps = [{"step": s, "time": timeline_chart.ms(timeline.step_duration(found, strategy, s)),
              "median": s == median, "current": s == step, "url": _link(run, strategy, s)}
             for s in found.timed_steps(strategy)]
    return {
        "strategies": [{"name": s, "current": s == strategy, "url": _link(run, s)}
                       for s in strategies],
        "strategy": strategy, "step": step, "steps": steps, "note": note,
        "chart": Markup(timeline_chart.chart(view, "tl-chart")),
        "view": view, "idle": _idle_table(view), "bubble": _bubble(run, found, view, strategy),
        "arrows": len(view.arrows), "heatmaps": _heatmaps(run, found),
        "trace_url": url_for("api.run_trace", run_id=run.id),
        "skipped": found.skipped, "truncated": found.truncated,
        "offsets": [(rank, timeline_chart.ms(off)) for rank, off in found.offsets.items()
                    if abs(off) >= 1e-6],
    }
