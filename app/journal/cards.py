"""Result cards: how a run shows inside an entry (```run blocks), on its page, and in the
Atom feed. Plain HTML tables and an inline SVG chart: no JavaScript, no style attributes,
so the same card works under the page's strict CSP and in a feed reader.

Everything printed here is escaped: this HTML is inserted after sanitizing.

This module also owns the ```run block itself: how one is written (`block`) and which
runs a text embeds (`embedded_runs`); create_app registers `run_card` as the notebook's
"run" embed.
"""

from __future__ import annotations

import math
import re
from html import escape

from sqlalchemy.orm import Session

from app.models import Run
from app.notebook.isoweeks import local
from jobs.lab import registry

# Linear on any text: [ \t]* where \s* would let every line start rescan the newlines
# after it (quadratic on a block followed by thousands of blank lines).
RUN_ID_RE = re.compile(r"^[ \t]*id[ \t]*:[ \t]*(\d{1,12})[ \t]*$", re.M)  # inside a block
RUN_BLOCK_RE = re.compile(r"^```run[ \t]*\n(.*?)^```", re.M | re.S)


def block(run_id: int) -> str:
    """The markdown that embeds a run's card."""
    return f"```run\nid: {run_id}\n```"


def embedded_runs(text: str) -> set[int]:
    """The ids of the runs a markdown text embeds."""
    return {int(m[1]) for b in RUN_BLOCK_RE.finditer(text)
            if (m := RUN_ID_RE.search(b[1]))}


def si(value, unit: str = "", digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    value = float(value)
    for factor, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.{digits}g} {prefix}{unit}".strip()
    return f"{value:.{digits}g} {unit}".strip()


def seconds(value) -> str:
    if value is None:
        return "–"
    value = float(value)
    if value >= 1:
        return f"{value:.3g} s"
    if value >= 1e-3:
        return f"{value * 1e3:.3g} ms"
    return f"{value * 1e6:.3g} µs"


def ratio(value) -> str:
    return "–" if value is None else f"{float(value):.2f}×"


def title_of(experiment: str) -> str:
    spec = registry.EXPERIMENTS.get(experiment)
    return spec["title"] if spec else experiment


def run_card(session: Session, source: str, timezone: str = "UTC") -> str:
    """The ```run embed: `id: 42` → the card of run 42, its time on the owner's clock."""
    match = RUN_ID_RE.search(source)
    if not match:
        return '<div class="embed-error">a run block needs a line "id: &lt;number&gt;"</div>'
    run = session.get(Run, int(match[1]))
    if run is None:
        return f'<div class="embed-error">there is no run {int(match[1])}</div>'
    return card(run, timezone)


def card(run: Run, timezone: str = "UTC") -> str:
    status = run.status.lower()
    env = run.environment or {}
    ranks = run.params.get("world_size", "?")
    where = " · ".join(str(x) for x in (
        env.get("backend"), f"{ranks} rank{'' if ranks == 1 else 's'}",
        env.get("device_model") if env.get("device") == "cuda" else env.get("device"),
    ) if x)
    when = local(run.finished_at or run.started_at or run.created_at, timezone)
    parts = [
        f'<figure class="run-card run-{escape(status)}">',
        f'<figcaption><a href="/runs/{run.id}">Run {run.id} · '
        f"{escape(title_of(run.experiment))}</a> "
        f'<span class="run-status">{escape(run.status)}</span> '
        f'<span class="run-meta">{escape(when.strftime("%Y-%m-%d %H:%M %Z"))}'
        f"{' · ' + escape(where) if where else ''}</span></figcaption>",
    ]
    if run.status != "SUCCEEDED":
        if run.reason:
            parts.append(f'<p class="run-reason">{escape(run.reason)}</p>')
        if run.status in ("QUEUED", "LEASED", "RUNNING"):
            parts.append(f"<p>step {run.progress_step} of {run.progress_total or '?'}</p>")
    result = run.result or {}
    if isinstance(result.get("strategies"), list):
        parts.append(_strategies(result))
    elif result.get("experiment") == "collectives" or "fits" in result:
        parts.append(_collectives(result))
    elif isinstance(result.get("table"), list) and "peak_flops" in result:
        parts.append(_roofline(result))
    parts.append("</figure>")
    return "\n".join(parts)


def _strategies(result: dict) -> str:
    rows, bars = [], []
    for s in result["strategies"]:
        if not isinstance(s, dict):
            continue
        check = s.get("correctness") or {}
        err = check.get("max_grad_abs_error")
        steps = check.get("steps_checked")
        check_text = ("✓ " + (f"{steps} steps, " if isinstance(steps, int) else "")
                      + (f"max err {err:.1e}" if isinstance(err, (int, float)) else "")
                      if check.get("passed") else "✗ " + str(check.get("reason") or "failed"))
        step = s.get("step_time_s") or {}
        pred = s.get("prediction") or {}
        comm = s.get("comm") or {}
        exact = comm.get("all_exact")
        mfu = s.get("mfu") or {}
        peak = f" <small>of {escape(str(mfu['peak_name']))}</small>" if mfu.get("peak_name") \
            else ""
        rows.append(
            "<tr>"
            f"<td>{escape(str(s.get('label') or s.get('strategy')))}</td>"
            f"<td>{escape(check_text)}</td>"
            f"<td>{seconds(step.get('median'))} <small>({seconds(step.get('p10'))}–"
            f"{seconds(step.get('p90'))})</small></td>"
            f"<td>{seconds(pred.get('step_time_s'))}</td>"
            f"<td>{ratio((s.get('ratios') or {}).get('step_time'))}</td>"
            f"<td>{escape(str(pred.get('dominant') or '–'))}</td>"
            f"<td>{_residual(pred)}</td>"
            f"<td>{si(s.get('tokens_per_s'))}</td>"
            f"<td>{percent(mfu.get('value'))}{peak}</td>"
            f"<td>{'–' if exact is None else ('exact' if exact else 'differs')}</td>"
            f"<td>{_memory(s.get('memory'))}</td>"
            "</tr>"
        )
        if step.get("median") is not None:
            bars.append((str(s.get("strategy")), step.get("median"), pred.get("step_time_s")))
    table = (
        '<table class="run-table"><thead><tr><th>strategy</th><th>correct</th>'
        "<th>step time (p10–p90)</th><th>predicted</th><th>measured/predicted</th>"
        "<th>dominant term</th><th>unexplained</th><th>tokens/s</th><th>MFU</th>"
        "<th>comm bytes vs model</th><th>memory measured / predicted</th>"
        "</tr></thead><tbody>" + "".join(rows) + "</tbody></table>"
    )
    return table + bar_chart(bars, "step time: measured (solid) vs predicted (outline)")


def _residual(pred: dict) -> str:
    """What the step-time model leaves unexplained, and the terms it knows it lacks."""
    residual = pred.get("residual_s")
    if not isinstance(residual, (int, float)):
        return "–"
    share = pred.get("residual_fraction")
    sign = "+" if residual >= 0 else "−"
    text = f"{sign}{seconds(abs(residual))}"
    if isinstance(share, (int, float)):
        text += f" ({share:+.0%})"
    missing = [str(m) for m in pred.get("unmodelled") or [] if m]
    return escape(text) + (f" <small>not modelled: {escape('; '.join(missing))}</small>"
                           if missing else "")


def _memory(memory) -> str:
    """Per rank: the peak seen (live storage, or CUDA's allocator) over the formula's."""
    if not isinstance(memory, list):
        return "–"
    parts = []
    for m in memory:
        if not isinstance(m, dict):
            continue
        peak = m.get("peak") or {}
        measured, predicted = peak.get("measured"), peak.get("predicted")
        if not isinstance(measured, (int, float)) or not isinstance(predicted, (int, float)):
            continue
        parts.append(f"r{escape(str(m.get('rank')))} {si(measured, 'B')} / "
                     f"{si(predicted, 'B')} ({ratio(peak.get('ratio'))})")
    return "<br>".join(parts) if parts else "–"


def _collectives(result: dict) -> str:
    fits = result.get("fits") or {}
    rows = "".join(
        f"<tr><td>{escape(op)}</td><td>{seconds(f.get('alpha_s'))}</td>"
        f"<td>{si(f.get('busbw_Bps'), 'B/s')}</td></tr>"
        for op, f in fits.items() if isinstance(f, dict)
    )
    peak: dict[str, float] = {}
    for row in result.get("table") or []:
        if isinstance(row, dict) and isinstance(row.get("busbw_Bps"), (int, float)):
            op = str(row.get("op"))
            peak[op] = max(peak.get(op, 0.0), float(row["busbw_Bps"]))
    bars = [(op, value, None) for op, value in peak.items()]
    return (
        '<table class="run-table"><thead><tr><th>collective</th><th>latency α</th>'
        "<th>bus bandwidth (fit)</th></tr></thead><tbody>" + rows + "</tbody></table>"
        + bar_chart(bars, "best measured bus bandwidth per collective", unit="B/s")
    )


def percent(value) -> str:
    return "–" if not isinstance(value, (int, float)) else f"{value:.0%}"


def _roofline(result: dict) -> str:
    rows = "".join(
        f"<tr><td>{escape(str(r.get('M')))}×{escape(str(r.get('N')))}×"
        f"{escape(str(r.get('K')))}</td><td>{si(r.get('flops_per_s'), 'FLOP/s')}</td>"
        f"<td>{percent(r.get('fraction_of_bound'))}</td>"
        f"<td>{escape(str(r.get('bound_by', '–')))}</td></tr>"
        for r in result.get("table") or [] if isinstance(r, dict)
    )
    return (
        f"<p>peak {si(result.get('peak_flops'), 'FLOP/s')}, copy bandwidth "
        f"{si(result.get('copy_bandwidth_Bps'), 'B/s')}</p>"
        '<table class="run-table"><thead><tr><th>GEMM M×N×K</th><th>measured</th>'
        "<th>of roofline</th><th>bound by</th></tr></thead><tbody>" + rows + "</tbody></table>"
    )


def bar_chart(bars: list[tuple[str, float, float | None]], caption: str, unit: str = "s") -> str:
    """Horizontal bars, one per label; an optional second value drawn as an outline."""
    bars = [(label, value, other) for label, value, other in bars
            if isinstance(value, (int, float)) and value > 0]
    if not bars:
        return ""
    top = max(max(v, o or 0) for _, v, o in bars)
    row_h, label_w, width = 22, 110, 420
    height = row_h * len(bars) + 24
    fmt = seconds if unit == "s" else (lambda v: si(v, unit))
    out = [f'<svg class="run-chart" viewBox="0 0 {width} {height}" width="{width}" '
           f'height="{height}" role="img" aria-label="{escape(caption)}" '
           'xmlns="http://www.w3.org/2000/svg">',
           f"<title>{escape(caption)}</title>"]
    span = width - label_w - 80
    for i, (label, value, other) in enumerate(bars):
        y = 4 + i * row_h
        w = max(1.0, span * value / top)
        out.append(f'<text x="0" y="{y + 14}" font-size="11" fill="currentColor">'
                   f"{escape(label[:18])}</text>")
        out.append(f'<rect x="{label_w}" y="{y + 3}" width="{w:.1f}" height="14" '
                   'fill="#4c78a8"/>')
        if other:
            ow = max(1.0, span * other / top)
            out.append(f'<rect x="{label_w}" y="{y + 1}" width="{ow:.1f}" height="18" '
                       'fill="none" stroke="#e45756" stroke-width="1.5"/>')
        out.append(f'<text x="{label_w + max(w, (span * (other or 0) / top)) + 4:.1f}" '
                   f'y="{y + 14}" font-size="11" fill="currentColor">{escape(fmt(value))}'
                   "</text>")
    out.append(f'<text x="0" y="{height - 4}" font-size="10" fill="currentColor">'
               f"{escape(caption)}</text></svg>")
    return "".join(out)
