"""One plain-text table from result.json files (used by gpu_check.sh and the CLI):
experiment, strategy, measured, predicted, their ratio, MFU with the peak it is a
fraction of, bus bandwidth (a collective's best; for a training strategy, the
calibrated link its prediction used), and a note: bytes exact or not, the peak memory
against its formula, what the step-time model left unexplained."""

from __future__ import annotations

import json
import os

from base.contract import RESULT_FILE

HEADER = ["experiment", "strategy/op", "status", "check", "measured", "predicted", "ratio",
          "MFU [peak]", "busbw", "note"]


def _fmt(x, unit: str = "", scale: float = 1.0, digits: int = 3) -> str:
    if x is None:
        return "-"
    return f"{x / scale:.{digits}g}{unit}"


def _ratio(a, b) -> str:
    return _fmt(a / b if a and b else None, "x")


def _mfu(value, peak_name) -> str:
    return "-" if value is None else f"{value * 100:.1f}% [{peak_name or 'peak'}]"


def _link_busbw(s: dict, result: dict) -> str:
    """The calibrated bus bandwidth (this run's W, the one the prediction used) of the link
    that carries most of the strategy's bytes."""
    links = (result.get("calibration") or {}).get("links") or {}
    rows = [r for r in (s.get("comm") or {}).get("bytes_vs_predicted") or [] if r["rank"] == 0]
    if not rows:
        return "-"
    kind = max(rows, key=lambda r: r["predicted_bytes"] or 0)["kind"]
    op = "send_recv" if kind in ("send", "recv") else kind
    return f"{op} {links[op]['busbw_Bps'] / 1e9:.3g} GB/s" if op in links else "-"


def _training_rows(exp: str, result: dict) -> list[list[str]]:
    rows = []
    for s in result["strategies"]:
        c = s["correctness"]
        rel = c.get("max_rel_error")
        check = ("pass" if c["passed"] else "FAIL") + (f" rel {rel:.1e}" if rel is not None else
                                                       f" grad {c['max_grad_abs_error']:.1e}")
        step = (s.get("step_time_s") or {}).get("median")
        pred = (s.get("prediction") or {}).get("step_time_s")
        mfu = s.get("mfu") or {}
        exact = (s.get("comm") or {}).get("all_exact")
        note = [{True: "bytes exact", False: "bytes MISMATCH", None: "-"}[exact]]
        memory = (s.get("ratios") or {}).get("memory_peak")
        if memory is not None:
            note.append(f"mem {memory:.2f}x")
        residual = (s.get("prediction") or {}).get("residual_s")
        if residual is not None:
            note.append(f"unexplained {residual * 1e3:+.3g} ms")
        rows.append([exp, s["strategy"], result.get("status", "?"), check, _fmt(step, " s"),
                     _fmt(pred, " s"), _ratio(step, pred),
                     _mfu(mfu.get("value"), mfu.get("peak_name")),
                     _link_busbw(s, result), ", ".join(note)])
    return rows


def rows_for(result: dict) -> list[list[str]]:
    exp, status = result.get("experiment", "?"), result.get("status", "?")
    if status != "succeeded" and not result.get("strategies"):
        reason = (result.get("reason") or {}).get("message", "")
        return [[exp, "-", status, reason[:60]] + ["-"] * 6]
    if "strategies" in result:
        return _training_rows(exp, result)
    if exp == "collectives":
        rows = []
        for op, fit in result["fits"].items():
            mine = [r for r in result["table"] if r["op"] == op]
            big = max(mine, key=lambda r: r["bytes"])
            best = max(r["busbw_Bps"] for r in mine)
            rows.append([exp, op, status, f"alpha {fit['alpha_s'] * 1e6:.0f} us",
                         _fmt(big["time_s"], " s") + f" @ {_fmt(big['bytes'], ' MB', 1e6)}",
                         _fmt(big.get("predicted_s"), " s"),
                         _ratio(big["time_s"], big.get("predicted_s")), "-",
                         _fmt(best, " GB/s", 1e9), f"fit W {fit['busbw_Bps'] / 1e9:.3g} GB/s"])
        return rows
    if exp == "gpt_mfu":
        return [[exp, f"{result['model']['params'] / 1e6:.1f}M {result['model']['dtype']}",
                 status, f"{result['tokens_per_s']:.4g} tok/s",
                 _fmt(result["achieved_flops"], " TFLOP/s", 1e12), "-", "-",
                 _mfu(result["mfu"], result.get("peak_name") or result["peak_source"]), "-",
                 f"step {_fmt(result['step_time_s']['median'], ' s')}"]]
    if exp == "gemm_roofline":
        return [[exp, result["dtype"], status, "peak",
                 _fmt(result["peak_flops"], " TFLOP/s", 1e12), "-", "-", "-",
                 f"copy {result['copy_bandwidth_Bps'] / 1e9:.3g} GB/s",
                 f"ridge {result['ridge_point_flop_per_byte']:.3g} FLOP/B"]]
    return [[exp, "-", status] + ["-"] * 7]


def table(dirs: list[str]) -> str:
    rows = [HEADER]
    for d in dirs:
        path = os.path.join(d, RESULT_FILE)
        if not os.path.exists(path):
            rows.append([os.path.basename(d.rstrip("/")), "-", "no result"] + ["-"] * 7)
            continue
        with open(path) as fh:
            rows.extend(rows_for(json.load(fh)))
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(HEADER))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
             for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
