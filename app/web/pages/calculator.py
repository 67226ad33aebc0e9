"""/calculator: the what-if calculator's page. A GET form of the calculator's inputs, and
the answer for them rendered on the server (the default configuration's when none are
given), so it works without JavaScript; app/static/calculator.js asks
/api/v1/calculator again as the inputs change and redraws the same elements.
"""

from __future__ import annotations

from flask import render_template, request, url_for

from app.db import get_session
from app.errors import Invalid
from app.journal import calibrations
from app.web.pages.blueprints import experiments as bp
from jobs.lab.predict import memory, whatif

MEMORY_PARTS = {"params": "Parameters", "grads": "Gradients", "optimizer": "Optimizer state",
                "activations": "Activations", "buffers": "Buffers"}
TIME_TERMS = {"gemm": "Compute: matmuls", "attention": "Compute: attention",
              "op_overhead": "Operator overhead", "memory_traffic": "Optimizer step",
              "TP all_reduce": "TP all-reduce", "PP send/recv": "PP send/recv",
              "bubble": "Pipeline bubble", "DP all_reduce": "DP all-reduce (exposed)",
              "DP reduce_scatter": "DP reduce-scatter (exposed)",
              "DP all_gather": "DP all-gather (exposed)"}
COMM_KINDS = ("TP all_reduce", "PP send", "PP recv", "DP all_reduce", "DP reduce_scatter",
              "DP all_gather")
DEGREES = {"dp": 10, "tp": 6, "pp": 6, "micro_batches": 8}  # slider: 2^0 .. 2^max


def size(n: float) -> str:
    """Bytes as the page shows them (decimal units, like the GPUs' datasheets)."""
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:,.1f} {unit}"
    return f"{n:,.0f} B"


def seconds(t: float) -> str:
    if t >= 1:
        return f"{t:,.2f} s"
    if t >= 1e-3:
        return f"{t * 1e3:,.1f} ms"
    return f"{t * 1e6:,.0f} µs"


def count(n: float) -> str:
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= scale:
            return f"{n / scale:,.2f}{unit}"
    return f"{n:,.0f}"


def bars(answer: dict) -> dict:
    """x and width (of 1000) of every segment of the two stacked bars, and the HBM line."""
    mem = answer["memory"]
    scale = max(mem["total_bytes"], answer["gpu"]["memory_bytes"]) * 1.04
    out, x = {"memory": {}, "time": {}}, 0.0
    for part in MEMORY_PARTS:
        width = 1000 * mem["parts_bytes"][part] / scale
        out["memory"][part] = (round(x, 2), round(width, 2))
        x += width
    out["hbm_x"] = round(1000 * answer["gpu"]["memory_bytes"] / scale, 2)
    total, x = answer["time"]["step_time_s"], 0.0
    for term in TIME_TERMS:
        width = 1000 * answer["time"]["terms_s"].get(term, 0.0) / total
        out["time"][term] = (round(x, 2), round(width, 2))
        x += width
    return out


def summary(answer: dict) -> str:
    """One line for a phone, kept in view under the sliders (calculator.js writes the same)."""
    mem = answer["memory"]
    fit = f"fits, {size(mem['margin_bytes'])} spare" if mem["fits"] else \
        f"over by {size(-mem['margin_bytes'])}"
    return (f"{seconds(answer['time']['step_time_s'])} a step · MFU "
            f"{answer['mfu'] * 100:.1f}% · {fit}")


def run_link(lab: dict) -> str:
    """The new-run form of the matching experiment, prefilled."""
    args = {f"param.{k}": v for k, v in lab["params"].items()}
    return url_for("experiments.new_run", name=lab["experiment"], **args)


def _last_values() -> dict:
    """The query's fields, each its last value (the form sends one of each; an older
    link's checkbox sent a hidden "false" before its "true")."""
    return {name: values[-1] for name, values in request.args.lists()}


@bp.get("/calculator")
def calculator():
    session = get_session()
    raw, message, field, status = _last_values(), "", None, 200
    try:
        answer = calibrations.calculate(session, raw)
        values = answer["inputs"]
    except Invalid as exc:
        message, field, status = exc.message, exc.field, 422
        answer = calibrations.calculate(session, {})
        values = {**answer["inputs"], **raw}
    gpus = [{"gpu": k, "label": g["label"]} for k, g in whatif.GPUS.items()]
    gpus += calibrations.offered(session)
    if not any(g["gpu"] == values["gpu"] for g in gpus):
        gpus.append({"gpu": values["gpu"], "label": answer["gpu"]["name"]
                     if not message else values["gpu"]})
    return render_template(
        "calculator.html", answer=answer, values=values, message=message, field=field,
        presets=whatif.PRESETS, gpus=gpus, recipes=memory.RECIPES, degrees=DEGREES,
        memory_parts=MEMORY_PARTS, time_terms=TIME_TERMS, comm_kinds=COMM_KINDS,
        bars=bars(answer), summary=summary(answer), size=size, seconds=seconds, count=count,
        run_link=run_link(answer["lab"]) if answer["lab"]["ok"] else ""), status
