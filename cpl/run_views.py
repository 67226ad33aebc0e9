"""Runs and experiments for the terminal: the catalogue, the run list, a run's result card
(measured against predicted, with its chart drawn as text bars and sparklines) and a
comparison of runs. Each has a table for a person and tab-separated lines for a pipe.
"""

from __future__ import annotations

import math

from rich.table import Table
from rich.text import Text

from base import statuses
from cpl.terminal import Out, duration, local_time, status_text

SPARKS = "▁▂▃▄▅▆▇█"
EIGHTHS = " ▏▎▍▌▋▊▉"


# -- numbers ------------------------------------------------------------------------------


def si(value, unit: str = "") -> str:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        return "–"
    for factor, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.3g} {prefix}{unit}".strip()
    return f"{value:.3g} {unit}".strip()


def seconds(value) -> str:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return "–"
    if value >= 1:
        return f"{value:.3g} s"
    if value >= 1e-3:
        return f"{value * 1e3:.3g} ms"
    return f"{value * 1e6:.3g} µs"


def percent(value) -> str:
    return f"{value:.0%}" if isinstance(value, (int, float)) else "–"


def bar(value: float, top: float, width: int) -> str:
    """A horizontal bar of `width` cells at full scale, in eighths of a cell."""
    cells = max(0.0, value / top * width) if top > 0 else 0.0
    full, part = int(cells), int((cells - int(cells)) * 8)
    return "█" * full + (EIGHTHS[part] if part else "")


def sparkline(values: list[float]) -> str:
    values = [v for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    if not values:
        return ""
    low, high = min(values), max(values)
    span = (high - low) or 1.0
    return "".join(SPARKS[min(7, int((v - low) / span * 7.999))] for v in values)


# -- the catalogue ------------------------------------------------------------------------


def bounds(spec: dict) -> str:
    if spec.get("choices"):
        return "|".join(str(c) for c in spec["choices"])
    low, high = spec.get("min"), spec.get("max")
    if low is None and high is None:
        return ""
    return f"{'' if low is None else low}..{'' if high is None else high}"


def show_experiments(out: Out, experiments: list[dict], detailed: bool) -> None:
    if not out.tty:
        for exp in experiments:
            for name, spec in exp["params"].items():
                out.tsv(exp["name"], name, spec.get("type"), _value(spec.get("default")),
                        spec.get("min"), spec.get("max"), ",".join(map(str, spec.get("choices")
                                                                       or [])))
        return
    for exp in experiments:
        out.print(Text.assemble((exp["name"], "id"), "  ", (exp.get("title") or "", "title")))
        if detailed and exp.get("description"):
            out.print(Text(exp["description"]))
        table = Table(box=None, pad_edge=False, show_header=True, header_style="bold")
        for column in ("param", "type", "default", "bounds") + (("meaning",) if detailed else ()):
            table.add_column(column, overflow="fold")
        for name, spec in exp["params"].items():
            row = [name, spec.get("type", ""), _value(spec.get("default")), bounds(spec)]
            table.add_row(*row, *((spec.get("description") or "",) if detailed else ()))
        out.print(table)
        out.print("")
    if not detailed:
        out.print(Text("details and meanings: cpl experiments NAME; start one: "
                       "cpl run NAME --param KEY=VALUE", style="muted"))


def _value(value) -> str:
    if isinstance(value, list):
        return ",".join(map(str, value))
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


# -- the run list -------------------------------------------------------------------------


def steps(run: dict) -> str:
    progress = run.get("progress") or {}
    return f"{progress.get('step', 0)}/{progress['total']}" if progress.get("total") else ""


def show_runs(out: Out, runs: list[dict]) -> None:
    if not out.tty:
        for r in runs:
            out.tsv(r["id"], r["status"], r["experiment"], r.get("created_at"),
                    r.get("finished_at"), steps(r), r.get("reason"))
        return
    width = out.console.width
    wide = width >= 72  # a phone's terminal gets the columns that matter most
    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in ("id", "status", "experiment", "steps") + (("created", "took") if wide else ()):
        table.add_column(column, no_wrap=True)
    if wide:
        table.add_column("why", no_wrap=True, overflow="ellipsis", max_width=max(8, width - 72))
    for r in runs:
        took = duration(r.get("started_at"), r.get("finished_at")) if r.get("started_at") else ""
        cells = [Text(str(r["id"]), style="id"), status_text(r["status"]), r["experiment"],
                 steps(r)]
        if wide:
            cells += [local_time(r.get("created_at")), took, r.get("reason") or ""]
        table.add_row(*cells)
    out.print(table)


# -- one run's card -----------------------------------------------------------------------


def show_card(out: Out, run: dict, title: str, metrics: dict) -> None:
    env = (run.get("result") or {}).get("environment") or run.get("environment") or {}
    ranks = (run.get("params") or {}).get("world_size", "?")
    where = " · ".join(str(x) for x in (env.get("backend"), f"{ranks} rank(s)",
                                         env.get("device_model") if env.get("device") == "cuda"
                                         else env.get("device"), run.get("runner")) if x)
    when = local_time(run.get("finished_at") or run.get("started_at") or run.get("created_at"))
    took = duration(run.get("started_at"), run.get("finished_at"))
    out.print(Text.assemble((f"Run {run['id']}", "id"), " · ", (title, "title"), "  ",
                            status_text(run["status"])))
    out.print(Text(" · ".join(x for x in (when, where, took and f"took {took}") if x),
                   style="muted"))
    out.print(Text("params: " + " ".join(f"{k}={_value(v)}" for k, v in
                                         (run.get("params") or {}).items())))
    if run["status"] != statuses.SUCCEEDED and run.get("reason"):
        failed = run["status"] in (statuses.FAILED, statuses.LOST)
        out.print(Text(run["reason"], style="red" if failed else ""))
    if run["status"] in statuses.UNFINISHED:
        out.print(f"step {steps(run) or '0/?'}" + (f" · {run['waiting']}" if run.get("waiting")
                                                   else ""))
    result = run.get("result") or {}
    if isinstance(result.get("strategies"), list):
        _strategies(out, result)
    elif result.get("experiment") == "collectives" or "fits" in result:
        _collectives(out, result)
    elif isinstance(result.get("table"), list) and "peak_flops" in result:
        _roofline(out, result)
    elif isinstance(result.get("reported"), dict):
        _own(out, result["reported"], result.get("reports") or {})
    if run.get("since"):
        _since(out, run["since"])
    for key, points in sorted(metrics.items()):
        values = [p[1] for p in points if isinstance(p, list) and len(p) == 2]
        if values:
            out.print(Text.assemble(f"{key:<18} ", (sparkline(values[-60:]), "cyan"),
                                    f"  {si(values[-1])} (last of {len(values)})"))
    out.print(Text(f"on the web: {run.get('url', '')}", style="muted"))


def _since(out: Out, since: dict) -> None:
    """What the card says of the runs before this one, in the server's words."""
    if since.get("edited_from"):
        names = ", ".join(since.get("edited") or []) or "parameters"
        out.print(Text(f"Parameters changed since #{since['edited_from']} ({names}): not "
                       "compared with it.", style="muted"))
    if not since.get("previous"):
        out.print(Text("The first successful run of these parameters: nothing to compare "
                       "yet.", style="muted"))
        return
    out.print(Text(f"Since run {since['previous']} (the trend: {since.get('trend_url', '')}):"))
    for line in since.get("lines") or []:
        if line.get("regression"):
            out.print(Text.assemble("  ", ("Regression:", "bold red"), " ", str(line["text"])))
        else:
            out.print(Text(f"  {line['text']}"))


def _table(*columns: str, names: list[str] | None = None) -> Table:
    """A table whose first column holds `names` whole (a strategy's name cut in two reads
    as two names); the others fold to fit."""
    table = Table(box=None, pad_edge=False, header_style="bold")
    for i, column in enumerate(columns):
        if i == 0 and names is not None:
            table.add_column(column, no_wrap=True,
                             min_width=max(map(len, names), default=len(column)))
        else:
            table.add_column(column, overflow="fold")
    return table


# The strategy table's number columns at their natural width, the p10-p90 range included.
NUMBERS_WIDTH = 82


def _strategies(out: Out, result: dict) -> None:
    rows = [s for s in result["strategies"] if isinstance(s, dict)]
    labels = [str(s.get("label") or s.get("strategy")) for s in rows]
    # Where the labels and the numbers do not fit side by side (an 80-column terminal, a
    # pipe), each row is named by its strategy's id, the labels follow as a key, and the
    # step time goes without its range: numbers folded over several lines do not read.
    wide = out.console.width >= max(map(len, labels), default=0) + NUMBERS_WIDTH
    names = labels if wide else [str(s.get("strategy") or label)
                                 for s, label in zip(rows, labels, strict=True)]
    table = _table("strategy", "correct", "step time (p10–p90)" if wide else "step time",
                   "predicted", "meas/pred", "dominant", "tokens/s", "MFU", names=names)
    bars = []
    for s, name in zip(rows, names, strict=True):
        check, step = s.get("correctness") or {}, s.get("step_time_s") or {}
        pred = s.get("prediction") or {}
        ok = Text("✓", style="green") if check.get("passed") else Text(
            "✗ " + str(check.get("reason") or "failed"), style="red")
        ratio = (s.get("ratios") or {}).get("step_time")
        spread = f" ({seconds(step.get('p10'))}–{seconds(step.get('p90'))})" if wide else ""
        table.add_row(name, ok, seconds(step.get("median")) + spread,
                      seconds(pred.get("step_time_s")),
                      "–" if ratio is None else f"{ratio:.2f}×", str(pred.get("dominant") or "–"),
                      si(s.get("tokens_per_s")), percent((s.get("mfu") or {}).get("value")))
        bars.append((name, step.get("median"), pred.get("step_time_s")))
    out.print(table)
    for name, label in zip(names, labels, strict=True):
        if name != label:
            out.print(Text.assemble((f"{name:<16} ", "muted"), label))
    _bars(out, bars, "step time: measured █ vs predicted ░", seconds)


def _collectives(out: Out, result: dict) -> None:
    table = _table("collective", "latency α", "bus bandwidth (fit)")
    for op, fit in (result.get("fits") or {}).items():
        if isinstance(fit, dict):
            table.add_row(op, seconds(fit.get("alpha_s")), si(fit.get("busbw_Bps"), "B/s"))
    out.print(table)
    peak: dict[str, float] = {}
    for row in result.get("table") or []:
        if isinstance(row, dict) and isinstance(row.get("busbw_Bps"), (int, float)):
            peak[str(row.get("op"))] = max(peak.get(str(row.get("op")), 0.0), row["busbw_Bps"])
    _bars(out, [(op, v, None) for op, v in peak.items()], "best measured bus bandwidth",
          lambda v: si(v, "B/s"))


def _roofline(out: Out, result: dict) -> None:
    out.print(f"peak {si(result.get('peak_flops'), 'FLOP/s')} · copy bandwidth "
              f"{si(result.get('copy_bandwidth_Bps'), 'B/s')}")
    table = _table("GEMM M×N×K", "measured", "of roofline", "bound by")
    bars = []
    for r in result.get("table") or []:
        if isinstance(r, dict):
            shape = f"{r.get('M')}×{r.get('N')}×{r.get('K')}"
            table.add_row(shape, si(r.get("flops_per_s"), "FLOP/s"),
                          percent(r.get("fraction_of_bound")), str(r.get("bound_by", "–")))
            bars.append((shape, r.get("flops_per_s"), r.get("roofline_bound_flops")))
    out.print(table)
    _bars(out, bars, "FLOP/s: measured █ vs roofline bound ░", lambda v: si(v, "FLOP/s"))


def _own(out: Out, reported: dict, declared: dict) -> None:
    """An own experiment's report: its scalars (with their declared units), a sparkline
    per series, and its tables."""
    units = {n: (d or {}).get("unit", "") for n, d in (declared.get("scalars") or {}).items()}
    table = _table("reported", "value", names=list(reported.get("scalars") or {}))
    for name, value in (reported.get("scalars") or {}).items():
        unit = units.get(name, "")
        table.add_row(name, seconds(value) if unit == "s" else si(value, unit))
    out.print(table)
    for name, points in (reported.get("series") or {}).items():
        values = [p[1] for p in points if isinstance(p, list) and len(p) == 2
                  and isinstance(p[1], (int, float))]
        if values:
            out.print(Text.assemble(f"{name:<18} ", (sparkline(values[-60:]), "cyan"),
                                    f"  {si(values[-1])} (last of {len(values)})"))
    for name, grid in (reported.get("tables") or {}).items():
        if not isinstance(grid, dict):
            continue
        shown = _table(*(str(c) for c in grid.get("columns") or []) or ("(empty)",))
        shown.title = name
        for row in grid.get("rows") or []:
            shown.add_row(*(v if isinstance(v, str) else si(v) for v in row))
        out.print(shown)


def _bars(out: Out, bars: list, caption: str, fmt) -> None:
    bars = [(label, v, o) for label, v, o in bars if isinstance(v, (int, float)) and v > 0]
    if not bars:
        return
    top = max(max(v, o if isinstance(o, (int, float)) else 0) for _, v, o in bars)
    width = max(10, min(40, out.console.width - 40))
    out.print(Text(caption, style="muted"))
    for label, value, other in bars:
        measured = bar(value, top, width)
        out.print(Text.assemble(f"{label[:16]:<16} ", (f"{measured:<{width}}", "blue"),
                                f" {fmt(value)}"))
        if isinstance(other, (int, float)) and other > 0:
            outline = bar(other, top, width).replace("█", "░")
            out.print(Text.assemble(" " * 17, (f"{outline:<{width}}", "red"), f" {fmt(other)}"))


# -- comparing runs -----------------------------------------------------------------------


def headline(result: dict | None) -> dict[str, float]:
    """A run's result as a few named numbers that compare across runs."""
    result = result or {}
    out: dict[str, float] = {}
    for s in result.get("strategies") or []:
        if isinstance(s, dict):
            label = str(s.get("label") or s.get("strategy"))
            out[f"{label} step time"] = (s.get("step_time_s") or {}).get("median")
            out[f"{label} meas/pred"] = (s.get("ratios") or {}).get("step_time")
            out[f"{label} tokens/s"] = s.get("tokens_per_s")
    for op, fit in (result.get("fits") or {}).items():
        if isinstance(fit, dict):
            out[f"{op} bus bandwidth"] = fit.get("busbw_Bps")
    if "peak_flops" in result:
        out["peak FLOP/s"] = result.get("peak_flops")
        out["copy bandwidth"] = result.get("copy_bandwidth_Bps")
    if isinstance(result.get("duration_s"), (int, float)):
        out["duration"] = result["duration_s"]
    return {k: v for k, v in out.items() if isinstance(v, (int, float))}


def comparison(data: dict) -> tuple[list[dict], dict[str, list], dict[str, list]]:
    runs = data.get("runs") or []
    params = {name: [(r.get("params") or {}).get(name) for r in runs]
              for name in data.get("differing_params") or []}
    heads = [headline(r.get("result")) for r in runs]
    labels = list(dict.fromkeys(k for h in heads for k in h))
    return runs, params, {label: [h.get(label) for h in heads] for label in labels}


def show_comparison(out: Out, data: dict) -> None:
    runs, params, results = comparison(data)
    if not out.tty:
        out.tsv("", *(r["id"] for r in runs))
        out.tsv("status", *(r["status"] for r in runs))
        for name, values in {**params, **results}.items():
            out.tsv(name, *(_value(v) if v is not None else "" for v in values))
        return
    table = Table(box=None, pad_edge=False, header_style="bold")
    table.add_column("")
    for r in runs:
        table.add_column(f"run {r['id']}", justify="right")
    table.add_row("experiment", *(r["experiment"] for r in runs))
    table.add_row("status", *(status_text(r["status"]) for r in runs))
    for name, values in params.items():
        table.add_row(Text(name, style="bold"), *(_value(v) for v in values))
    if results:
        table.add_section()
    for label, values in results.items():
        base = values[0]
        fmt = seconds if "time" in label or label == "duration" else si
        if "meas/pred" in label:
            fmt = (lambda v: f"{v:.2f}×")  # noqa: E731
        cells = ["–" if v is None else fmt(v) + (f" ({v / base:.2f}×)" if i and base else "")
                 for i, v in enumerate(values)]
        table.add_row(label, *cells)
    out.print(table)
    if not params:
        out.print(Text("the runs have the same parameters", style="muted"))
    out.print(Text("(×) is against the first run, the baseline", style="muted"))
