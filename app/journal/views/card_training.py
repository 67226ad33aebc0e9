"""The body of a training run's card (data_parallel, pipeline, tensor_parallel, zero):
key numbers first, one compact row per strategy; step time measured against predicted and
memory per rank as charts; per-step curves, the pipeline's stages and bubble, throughput
against a baseline and every strategy's full numbers behind <details>.

Every value is read defensively (app.journal.views.lessons.num): a result is what a runner
sent, and a card must render whatever that was.
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape

from app.journal.numbers import percent, ratio, seconds, si
from app.journal.views import charts
from app.journal.views.card_experts import experts
from app.journal.views.charts import Chart
from app.journal.views.lessons import MAX_STRATEGIES, num

MEMORY_KEYS = ("params", "grads", "optimizer", "activations", "buffers & other")
MAX_RANKS_SHOWN = 2  # per strategy in the memory chart: rank 0 and the fullest one
MAX_STEPS = 200


@dataclass
class Body:
    """A card's body: its HTML, the charts its image is made of, and the image's alt text."""

    html: str
    charts: list[Chart]
    alt: str


def _cell(value) -> str:
    return "–" if value is None else escape(str(value)[:8])


def _name(s: dict) -> str:
    return str(s.get("strategy") or "?")[:40]


def _passed(s: dict) -> bool:
    return isinstance(s.get("correctness"), dict) and bool(s["correctness"].get("passed"))


def _memory_rows(s: dict) -> list[dict]:
    rows = [m for m in (s.get("memory") or [])[:64] if isinstance(m, dict)] \
        if isinstance(s.get("memory"), list) else []
    if len(rows) <= MAX_RANKS_SHOWN:
        return rows
    fullest = max(rows[1:], key=lambda m: num(m, "peak", "measured") or 0)
    return [rows[0], fullest]


def _residual(s: dict) -> str:
    residual = num(s, "prediction", "residual_s")
    if residual is None:
        return "–"
    text = ("+" if residual >= 0 else "−") + seconds(abs(residual))
    share = num(s, "prediction", "residual_fraction")
    return text + (f" ({share:+.0%})".replace("-", "−") if share is not None else "")


def _unexplained_note(s: dict, missing: list[str]) -> str:
    """What the model leaves out can only explain a step slower than its price: beside a
    step faster than priced, the note says the model priced too much instead."""
    residual = num(s, "prediction", "residual_s")
    if residual is not None and residual < 0:
        return " <small>faster than priced: the model overestimates this step</small>"
    return f" <small>not modelled: {escape('; '.join(missing))}</small>" if missing else ""


def _spread(s: dict) -> str:
    """The median's spread, as ±half the interquartile range over the median."""
    iqr = num(s, "step_time_s", "iqr_fraction")
    return f" <small>±{iqr / 2:.0%}</small>" if iqr is not None else ""


def invalid(s: dict) -> list[str]:
    """What the run itself says makes this strategy's efficiency figures untrustworthy."""
    found = s.get("invalid")
    return [str(x)[:300] for x in found[:4]] if isinstance(found, list) else []


def warnings(strategies: list[dict]) -> str:
    lines = [f"<li>{escape(_name(s))}: {escape(x)}</li>" for s in strategies
             for x in invalid(s)]
    return (f'<ul class="card-warn" role="note">{"".join(lines)}</ul>' if lines else "")


def key_table(strategies: list[dict]) -> str:
    rows = []
    for s in strategies:
        ok = _passed(s)
        mark = ('<span class="ok-mark">✓</span>' if ok else '<span class="fail-mark">✗</span>')
        name = escape(_name(s)).replace("_", "_<wbr>")
        rows.append(f'<tr><td class="card-name">{name}</td><td>{mark}</td>'
                    f'<td class="num">{seconds(num(s, "step_time_s", "median"))}'
                    f'{_spread(s)}</td>'
                    f'<td class="num">{ratio(num(s, "ratios", "step_time"))}</td>'
                    f'<td class="num">{si(num(s, "tokens_per_s"))}</td></tr>')
    return ('<table class="run-table card-keys"><thead><tr><th scope="col">strategy</th>'
            '<th scope="col"><abbr title="passed the correctness gate">ok</abbr></th>'
            '<th scope="col"><abbr title="median of the timed steps, ± half their '
            'interquartile range">step</abbr></th><th scope="col"><abbr title="measured / '
            'predicted step time">meas/<wbr>pred</abbr></th><th scope="col">tokens/s</th>'
            '</tr></thead>'
            f"<tbody>{''.join(rows)}</tbody></table>")


def step_chart(strategies: list[dict]) -> Chart | None:
    rows = [(f"{_name(s)} · {_residual(s)} unexplained",
             [num(s, "step_time_s", "median"), num(s, "prediction", "step_time_s")])
            for s in strategies]
    return charts.bars("Step time per strategy: measured (solid) against the cost model's "
                       "prediction (outline), with what the model leaves unexplained", rows,
                       [("measured", False), ("predicted", True)], seconds)


def _parts(m: dict, side: str) -> tuple[dict, float | None]:
    """One rank's memory by kind, measured or predicted, and its peak."""
    act = num(m, "saved_activation_peak_bytes" if side == "measured"
              else "predicted_activation_bytes")
    parts = {k: num(m, side, k) for k in ("params", "grads", "optimizer")}
    parts["activations"] = act
    peak = num(m, "peak", side)
    known = sum(v for v in parts.values() if v and v > 0)
    parts["buffers & other"] = max(0.0, peak - known) if peak else None
    return parts, peak


def memory_chart(strategies: list[dict]) -> Chart | None:
    groups = []
    for s in strategies:
        for m in _memory_rows(s):
            measured, m_peak = _parts(m, "measured")
            predicted, p_peak = _parts(m, "predicted")
            groups.append((f"{_name(s)} · rank {str(m.get('rank'))[:6]}",
                           [("M", measured, m_peak), ("P", predicted, p_peak)]))
    return charts.stacked("Memory per rank: measured (M) beside predicted (P), by kind; the "
                          "tick marks the step's peak", groups, MEMORY_KEYS,
                          lambda v: si(v, "B"), marker_name="peak")


def _per_step(s: dict) -> list[dict]:
    steps = s.get("per_step")
    return [p for p in steps[:MAX_STEPS] if isinstance(p, dict)] \
        if isinstance(steps, list) else []


def per_step(strategies: list[dict]) -> str:
    timed = [s for s in strategies if _per_step(s)]
    if not timed:
        return ""
    # an outlier stays in the numbers below, marked, but out of the curve it would squash
    made = [charts.lines(title, [(_name(s), [(num(p, "step"), num(p, key)) for p in
                                            _per_step(s) if key != "time_s"
                                            or not p.get("outlier")]) for s in timed],
                         fmt, "timed step")
            for title, key, fmt in (("Step time at each timed step (outliers left out)",
                                     "time_s", seconds),
                                    ("Training loss at each timed step", "loss",
                                     lambda v: f"{v:.3g}"))]
    numbers = "".join(
        f"<dt>{escape(_name(s))}</dt><dd>"
        # the card's details count every timed step: say when these are the first ones
        + (f"the first 12 of {n} timed steps: " if (n := len(_per_step(s))) > 12 else "")
        + escape(", ".join(seconds(num(p, "time_s")) + (" (outlier)" if p.get("outlier")
                                                        else "") for p in _per_step(s)[:12]))
        + "; loss " + escape(", ".join(f"{v:.4g}" if (v := num(p, "loss")) is not None
                                       else "–" for p in _per_step(s)[:12])) + "</dd>"
        for s in timed)
    return ("<details><summary>Step time and loss, step by step</summary>"
            f'<div class="card-charts">{"".join(c.svg() for c in made if c)}</div>'
            f'<dl class="card-facts">{numbers}</dl></details>')


def _layers(extra: dict) -> str:
    layers = extra.get("layers")
    if not isinstance(layers, list) or not layers:
        return "–"
    values = [str(x)[:6] for x in layers[:64]]
    return values[0] if len(values) == 1 else f"{values[0]}–{values[-1]} ({len(layers)})"


def pipeline(strategies: list[dict]) -> str:
    piped = [s for s in strategies if isinstance(s.get("bubble"), dict)]
    if not piped:
        return ""
    chart = charts.bars("Pipeline bubble: stages' measured idle share of the step against "
                        "the formula (p−1)/(m+p−1)",
                        [(_name(s), [num(s, "bubble", "measured_idle_fraction"),
                                     num(s, "bubble", "predicted")]) for s in piped],
                        [("measured idle", False), ("predicted bubble", True)], percent)
    rows = []
    for s in piped:
        memory = {str(m.get("rank")): m for m in s.get("memory") or [] if isinstance(m, dict)}
        extras = [e for e in (s.get("extra") or [])[:64] if isinstance(e, dict)] \
            if isinstance(s.get("extra"), list) else []
        for e in extras:
            m = memory.get(str(e.get("rank")), {})
            rows.append(f"<tr><td>{escape(_name(s))}</td><td>{_cell(e.get('stage'))}"
                        f"</td><td>{escape(_layers(e))}</td>"
                        f"<td class=\"num\">{_cell(e.get('max_in_flight'))}</td>"
                        f"<td class=\"num\">{si(num(m, 'saved_activation_peak_bytes'), 'B')}"
                        f" / {si(num(m, 'predicted_activation_bytes'), 'B')}</td></tr>")
    table = ('<table class="run-table card-stages"><thead><tr><th scope="col">strategy</th>'
             '<th scope="col">stage</th><th scope="col">layers</th><th scope="col">'
             '<abbr title="micro-batches in flight at most">in flight</abbr></th>'
             '<th scope="col">activations held meas / pred</th></tr></thead>'
             f"<tbody>{''.join(rows)}</tbody></table>") if rows else ""
    return ("<details><summary>Pipeline: bubble and stages</summary>"
            + (chart.svg() if chart else "") + table + "</details>")


DIM_NAMES = {"dp": "data-parallel gradients", "pp": "pipeline activations",
             "tp": "tensor-parallel all-reduces"}


def _mesh_bytes(s: dict) -> tuple[dict[str, float], float]:
    """A mesh strategy's bytes per dimension summed over its ranks, and those that cross
    nodes (its extra's mesh.dims: {dim: {bytes, link}} per rank)."""
    per_dim: dict[str, float] = {}
    inter = 0.0
    for e in (s.get("extra") or [])[:64] if isinstance(s.get("extra"), list) else []:
        dims = e.get("mesh", {}).get("dims") if isinstance(e, dict) and \
            isinstance(e.get("mesh"), dict) else None
        for dim, row in (dims.items() if isinstance(dims, dict) else []):
            b = num(row, "bytes") if isinstance(row, dict) else None
            if dim in DIM_NAMES and b is not None and b >= 0:
                per_dim[dim] = per_dim.get(dim, 0.0) + b
                inter += b if row.get("link") == "inter" else 0.0
    return per_dim, inter


def mesh(strategies: list[dict]) -> str:
    """One line per mesh strategy: which dimension's traffic dominates, and how much of
    all its bytes cross nodes."""
    lines = []
    for s in strategies:
        per_dim, inter = _mesh_bytes(s)
        total = sum(per_dim.values())
        if not total:
            continue
        dim = max(per_dim, key=lambda d: per_dim[d])
        lines.append(f"<li>{escape(_name(s))}: <strong>{dim}</strong> dominates — "
                     f"{DIM_NAMES[dim]} are {percent(per_dim[dim] / total)} of "
                     f"{si(total, 'B')} a step; {percent(inter / total)} cross nodes</li>")
    return f'<ul class="card-mesh">{"".join(lines)}</ul>' if lines else ""


def throughput(strategies: list[dict]) -> str:
    rated = [s for s in strategies if (num(s, "tokens_per_s") or 0) > 0]
    if len(rated) < 2:
        return ""
    base = next((s for s in rated if s.get("strategy") == "single"), rated[0])
    chart = charts.bars(f"Tokens per second relative to {_name(base)}",
                        [(_name(s), [num(s, "tokens_per_s") / num(base, "tokens_per_s")])
                         for s in rated], [("tokens/s", False)], ratio,
                        reference=(1.0, f"1× = {_name(base)}"))
    return ("<details><summary>Throughput against " + escape(_name(base)) + "</summary>"
            + (chart.svg() if chart else "") + "</details>")


def _check(s: dict) -> str:
    check = s.get("correctness") if isinstance(s.get("correctness"), dict) else {}
    if not check.get("passed"):
        return "✗ " + str(check.get("reason") or "failed")[:300]
    steps, err = num(check, "steps_checked"), num(check, "max_grad_abs_error")
    return "✓" + (f" {steps:g} steps" if steps is not None else "") + \
        (f", max err {err:.1e}" if err is not None else "")


def _memory_text(s: dict) -> str:
    parts = []
    for m in (s.get("memory") or [])[:16] if isinstance(s.get("memory"), list) else []:
        if isinstance(m, dict) and num(m, "peak", "measured") is not None \
                and num(m, "peak", "predicted") is not None:
            parts.append(f"r{escape(str(m.get('rank'))[:6])} {si(num(m, 'peak', 'measured'), 'B')}"
                         f" / {si(num(m, 'peak', 'predicted'), 'B')} "
                         f"({ratio(num(m, 'peak', 'ratio'))})")
    return "<br>".join(parts) or "–"


def _state_text(s: dict) -> str:
    rows = _memory_rows(s)[:1]
    if not rows:
        return "–"
    return escape(", ".join(f"{k} {si(num(rows[0], 'measured', k), 'B')} / "
                            f"{si(num(rows[0], 'predicted', k), 'B')}"
                            for k in ("params", "grads", "optimizer")))


def _timing_note(s: dict) -> str:
    n, outliers = num(s, "step_time_s", "n"), (s.get("step_time_s") or {}).get("outliers")
    stopped = (s.get("step_time_s") or {}).get("stopped")
    parts = [f"{n:g} timed steps"] if n is not None else []
    if isinstance(outliers, list) and outliers:
        parts.append(f"{len(outliers)} outlier{'s' if len(outliers) > 1 else ''} marked")
    if isinstance(stopped, str) and stopped != "settled":
        parts.append(f"spread not settled ({stopped[:40]})")
    return f"; {', '.join(parts)}" if parts else ""


def _facts(s: dict) -> str:
    pred = s.get("prediction") if isinstance(s.get("prediction"), dict) else {}
    missing = [str(x)[:200] for x in (pred.get("unmodelled") or [])[:8]
               if x] if isinstance(pred.get("unmodelled"), list) else []
    mfu = s.get("mfu") if isinstance(s.get("mfu"), dict) else {}
    exact = (s.get("comm") or {}).get("all_exact") if isinstance(s.get("comm"), dict) else None
    facts = [
        ("correct", escape(_check(s))),
        ("step time: median (p10–p90)", f"{seconds(num(s, 'step_time_s', 'median'))} "
                                         f"({seconds(num(s, 'step_time_s', 'p10'))}–"
                                         f"{seconds(num(s, 'step_time_s', 'p90'))})"
                                         + escape(_timing_note(s))),
        ("predicted", seconds(num(pred, "step_time_s"))),
        ("measured/predicted", ratio(num(s, "ratios", "step_time"))),
        ("dominant term", escape(str(pred.get("dominant") or "–")[:40])),
        ("unexplained", escape(_residual(s)) + _unexplained_note(s, missing)),
        ("tokens/s", si(num(s, "tokens_per_s"))),
        ("MFU", ("invalid (see above)" if mfu.get("valid") is False
                 else percent(num(mfu, "value"))) + (
            f" <small>of {escape(str(mfu['peak_name'])[:80])}</small>"
            if mfu.get("peak_name") else "")),
        ("comm bytes vs model", "–" if exact is None else ("exact" if exact else "differs")),
        ("model state meas / pred (rank 0)", _state_text(s)),
        ("memory measured / predicted", _memory_text(s)),
    ]
    label = escape(str(s.get("label") or _name(s))[:120])
    return (f"<h4>{escape(_name(s))} <small>{label}</small></h4><dl class=\"card-facts\">"
            + "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in facts) + "</dl>")


def body(result: dict) -> Body:
    strategies = [s for s in result["strategies"][:MAX_STRATEGIES] if isinstance(s, dict)]
    timed = [s for s in strategies if _passed(s)]
    step, memory = step_chart(timed), memory_chart(timed)
    made = [c for c in (step, memory) if c]
    html = (key_table(strategies) + warnings(timed)
            + (f'<div class="card-charts">{"".join(c.svg() for c in made)}</div>'
               if made else "")
            + mesh(timed) + experts(timed) + per_step(timed) + pipeline(timed) + throughput(timed)
            + ("<details><summary>Each strategy in detail</summary>"
               + "".join(_facts(s) for s in strategies) + "</details>" if strategies else ""))
    alt = "Step time measured (predicted): " + "; ".join(
        f"{_name(s)} {seconds(num(s, 'step_time_s', 'median'))} "
        f"({seconds(num(s, 'prediction', 'step_time_s'))})" for s in timed[:8])
    return Body(html, made, alt if timed else "")
