"""One run's result card for the terminal (`cpl runs show`): measured against predicted per
strategy, its chart drawn as text bars, its series as sparklines, and what the card says
of the runs before it. Every table fits the terminal: a name too long for its column is
cut with an ellipsis or moved under the table, never folded through the numbers.
"""

from __future__ import annotations

from rich.cells import cell_len
from rich.table import Table
from rich.text import Text

from base import statuses
from cpl.run_views import bar, legend, param_text, percent, seconds, si, sparkline, steps
from cpl.terminal import Out, duration, local_time, status_text


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
    out.print(Text("params: " + " ".join(f"{k}={param_text(v)}" for k, v in
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
            _series(out, key, values)
    out.print(Text(f"on the web: {run.get('url', '')}", style="muted"))


def _series(out: Out, name: str, values: list) -> None:
    """A series on one line: its name, a sparkline of its last values (60, fewer where the
    line would wrap), the latest value and how many there are."""
    head = f"{name if len(name) <= 18 else name[:17] + '…':<18} "
    tail = f"  {si(values[-1])} (last of {len(values)})"
    shown = values[-max(8, min(60, out.console.width - len(head) - len(tail))):]
    out.print(Text.assemble(head, (sparkline(shown), "cyan"), tail))


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


TERM_WHOLE = 16  # a name this long is shown whole, other columns dropped if they must


def _fitted(header: list[str], rows: list[list], width: int, squeezed: int,
            droppable: tuple[int, ...] = ()) -> Table:
    """A table of one line per row, each cell whole but column `squeezed`'s (a cost-model
    term's name: no name may push the numbers onto a second line), cut with an ellipsis
    to what the others leave of `width`; where that is not room for TERM_WHOLE of its
    characters, the `droppable` columns go first, in that order."""
    natural = [max(cell_len(str(cell)) for cell in [header[i], *(r[i] for r in rows)])
               for i in range(len(header))]
    keep = list(range(len(header)))
    least = min(natural[squeezed], TERM_WHOLE)

    def room() -> int:  # two spaces between columns
        return width - sum(natural[i] for i in keep if i != squeezed) - 2 * (len(keep) - 1)

    for i in droppable:
        if room() >= least:
            break
        keep.remove(i)
    table = Table(box=None, pad_edge=False, header_style="bold")
    for i in keep:
        table.add_column(header[i], no_wrap=True, overflow="ellipsis",
                         max_width=max(room(), 4) if i == squeezed else None)
    for r in rows:
        table.add_row(*(r[i] for i in keep))
    return table


def _strategies(out: Out, result: dict) -> None:
    rows = [s for s in result["strategies"] if isinstance(s, dict)]
    labels = [str(s.get("label") or s.get("strategy")) for s in rows]
    # Where the labels and the numbers do not fit side by side (an 80-column terminal, a
    # pipe), each row is named by its strategy's id, the labels follow as a key, and the
    # step time goes without its range, under shorter headers: numbers folded over
    # several lines do not read.
    wide = out.console.width >= max(map(len, labels), default=0) + NUMBERS_WIDTH
    names = labels if wide else [str(s.get("strategy") or label)
                                 for s, label in zip(rows, labels, strict=True)]
    header = (["strategy", "correct", "step time (p10–p90)", "predicted", "meas/pred",
               "dominant", "tokens/s", "MFU"] if wide else
              ["strategy", "ok", "step", "pred.", "meas/pred", "dominant", "tok/s", "MFU"])
    cells, bars, failed = [], [], []
    for s, name in zip(rows, names, strict=True):
        check, step = s.get("correctness") or {}, s.get("step_time_s") or {}
        pred = s.get("prediction") or {}
        if not check.get("passed"):
            failed.append((name, str(check.get("reason") or "failed")))
        ratio = (s.get("ratios") or {}).get("step_time")
        spread = f" ({seconds(step.get('p10'))}–{seconds(step.get('p90'))})" if wide else ""
        cells.append([name, Text("✓", style="green") if check.get("passed") else
                      Text("✗", style="red"), seconds(step.get("median")) + spread,
                      seconds(pred.get("step_time_s")),
                      "–" if ratio is None else f"{ratio:.2f}×", str(pred.get("dominant") or "–"),
                      si(s.get("tokens_per_s")), percent((s.get("mfu") or {}).get("value"))])
        bars.append((name, step.get("median"), pred.get("step_time_s")))
    out.print(_fitted(header, cells, out.console.width, squeezed=5, droppable=(6, 7, 3)))
    legend(out, [(name, Text(label)) for name, label in zip(names, labels, strict=True)
               if name != label] + [(name, Text("✗ " + why, style="red")) for name, why in failed])
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
            _series(out, name, values)
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
        label = label if len(label) <= 16 else label[:15] + "…"
        out.print(Text.assemble(f"{label:<16} ", (f"{measured:<{width}}", "blue"),
                                f" {fmt(value)}"))
        if isinstance(other, (int, float)) and other > 0:
            outline = bar(other, top, width).replace("█", "░")
            out.print(Text.assemble(" " * 17, (f"{outline:<{width}}", "red"), f" {fmt(other)}"))
