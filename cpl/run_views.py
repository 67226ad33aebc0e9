"""Runs and experiments for the terminal: the catalogue, the run list and a comparison of
runs (a run's result card is run_card.py), and the numbers and text charts they all
draw. Each has a table for a person and tab-separated lines for a pipe.
"""

from __future__ import annotations

import math

from rich.table import Table
from rich.text import Text

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


def bounds(spec: dict, between: str = "|") -> str:
    if spec.get("choices"):
        return between.join(str(c) for c in spec["choices"])
    low, high = spec.get("min"), spec.get("max")
    if low is None and high is None:
        return ""
    return f"{'' if low is None else low}..{'' if high is None else high}"


def show_experiments(out: Out, experiments: list[dict], detailed: bool) -> None:
    if not out.tty:
        for exp in experiments:
            for name, spec in exp["params"].items():
                out.tsv(exp["name"], name, spec.get("type"), param_text(spec.get("default")),
                        spec.get("min"), spec.get("max"), ",".join(map(str, spec.get("choices")
                                                                       or [])))
        return
    for exp in experiments:
        out.print(Text.assemble((exp["name"], "id"), "  ", (exp.get("title") or "", "title")))
        if detailed and exp.get("description"):
            out.print(Text(exp["description"]))
        rows = []
        for name, spec in exp["params"].items():
            default = spec.get("default")
            rows.append([name, spec.get("type", ""), ", ".join(map(str, default))
                         if isinstance(default, list) else param_text(default),
                         bounds(spec, " | "), *([spec.get("description") or ""] * detailed)])
        table, meanings = _params_table(rows, out.console.width)
        out.print(table)
        if meanings:  # too narrow to read them beside: under the table, each wrapped whole
            key = Table.grid(padding=(0, 2))
            key.add_column(no_wrap=True)
            key.add_column()
            for name, meaning in meanings:
                key.add_row(Text(name, style="id"), meaning)
            out.print(key)
        out.print("")
    if not detailed:
        out.print(Text("details and meanings: cpl experiments NAME; start one: "
                       "cpl run NAME --param KEY=VALUE", style="muted"))


def _params_table(rows: list[list[str]], width: int) -> tuple[Table, list[tuple[str, str]]]:
    """Parameters, their names whole; a default or bounds list wraps between its items,
    never through a name ("dp_b / ucket"), and a meaning, prose, keeps room beside them,
    or where there is none (a phone), is handed back to follow the table."""
    header = ["param", "type", "default", "bounds", "meaning"][:len(rows[0]) if rows else 4]
    natural = [max(len(c) for c in [h, *(r[i] for r in rows)]) for i, h in enumerate(header)]
    word = [max(len(w) for c in [h, *(r[i] for r in rows)] for w in c.split())
            for i, h in enumerate(header)]
    sizes: list[int | None] = [None] * len(header)
    if len(header) == 5 and sum(natural) + 8 > width:
        room = width - natural[0] - natural[1] - 8  # two spaces between columns
        left = room - min(30, room // 2)  # what the meaning leaves the lists
        sizes[2] = min(natural[2], max(word[2], left * 2 // 5))
        sizes[3] = min(natural[3], max(word[3], left - sizes[2]))
        sizes[4] = room - sizes[2] - sizes[3]
    apart = len(sizes) == 5 and sizes[4] is not None and sizes[4] < 20
    if apart:
        header, sizes = header[:4], [None] * 4
    table = Table(box=None, pad_edge=False, show_header=True, header_style="bold")
    for i, column in enumerate(header):
        table.add_column(column, width=sizes[i], no_wrap=i < 2, overflow="fold")
    for row in rows:
        table.add_row(*row[:len(header)])
    return table, [(row[0], row[4]) for row in rows if row[4]] if apart else []


def param_text(value) -> str:
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


# -- comparing runs -----------------------------------------------------------------------


def headline(result: dict | None, by_id: bool = False) -> dict[str, float]:
    """A run's result as a few named numbers that compare across runs (a strategy's
    named by its label, or by its id)."""
    result = result or {}
    out: dict[str, float] = {}
    for s in result.get("strategies") or []:
        if isinstance(s, dict):
            label = str((s.get("strategy") if by_id else None) or s.get("label")
                        or s.get("strategy"))
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


def comparison(data: dict, by_id: bool = False) \
        -> tuple[list[dict], dict[str, list], dict[str, list]]:
    runs = data.get("runs") or []
    params = {name: [(r.get("params") or {}).get(name) for r in runs]
              for name in data.get("differing_params") or []}
    heads = [headline(r.get("result"), by_id) for r in runs]
    labels = list(dict.fromkeys(k for h in heads for k in h))
    return runs, params, {label: [h.get(label) for h in heads] for label in labels}


def show_comparison(out: Out, data: dict) -> None:
    runs, params, results = comparison(data)
    if not out.tty:
        out.tsv("", *(r["id"] for r in runs))
        out.tsv("status", *(r["status"] for r in runs))
        for name, values in {**params, **results}.items():
            out.tsv(name, *(param_text(v) if v is not None else "" for v in values))
        return
    table = _comparison_table(runs, params, results)
    if table.__rich_measure__(out.console, out.console.options).maximum > out.console.width:
        # the strategies' labels beside the numbers do not fit: their ids, and a key
        runs, params, results = comparison(data, by_id=True)
        table = _comparison_table(runs, params, results)
        named = {str(s.get("strategy")): str(s.get("label")) for r in runs
                 for s in (r.get("result") or {}).get("strategies") or []
                 if isinstance(s, dict) and s.get("strategy") and s.get("label")}
        out.print(table)
        legend(out, [(name, Text(label)) for name, label in named.items() if name != label])
    else:
        out.print(table)
    if not params:
        out.print(Text("the runs have the same parameters", style="muted"))
    out.print(Text("(×) is against the first run, the baseline", style="muted"))


def legend(out: Out, lines: list[tuple[str, Text]]) -> None:
    """Lines under a table, each a row's name and what it says of it, wrapped in a column
    of its own (a label, a gate's reason: prose that wraps at its words)."""
    if lines:
        grid = Table.grid(padding=(0, 1))
        grid.add_column(no_wrap=True, min_width=16)
        grid.add_column()
        for name, text in lines:
            grid.add_row(Text(name, style="muted"), text)
        out.print(grid)


def _comparison_table(runs: list[dict], params: dict, results: dict) -> Table:
    table = Table(box=None, pad_edge=False, header_style="bold")
    table.add_column("")
    for r in runs:
        table.add_column(f"run {r['id']}", justify="right")
    table.add_row("experiment", *(r["experiment"] for r in runs))
    table.add_row("status", *(status_text(r["status"]) for r in runs))
    for name, values in params.items():
        table.add_row(Text(name, style="bold"), *(param_text(v) for v in values))
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
    return table
