"""One plain-text table from result.json files (used by gpu_check.sh and the CLI)."""

from __future__ import annotations

import json
import os

from jobs.lab.contract import RESULT_FILE


def _fmt(x, unit: str = "", scale: float = 1.0, digits: int = 3) -> str:
    if x is None:
        return "-"
    return f"{x / scale:.{digits}g}{unit}"


def rows_for(result: dict) -> list[list[str]]:
    exp, status = result.get("experiment", "?"), result.get("status", "?")
    if status != "succeeded" and not result.get("strategies"):
        reason = (result.get("reason") or {}).get("message", "")
        return [[exp, "-", status, reason[:60], "-", "-", "-"]]
    if "strategies" in result:
        rows = []
        for s in result["strategies"]:
            c = s["correctness"]
            gate = "pass" if c["passed"] else "FAIL"
            step = (s.get("step_time_s") or {}).get("median")
            pred = (s.get("prediction") or {}).get("step_time_s")
            exact = (s.get("comm") or {}).get("all_exact")
            rows.append([exp, s["strategy"], gate, f"grad err {c['max_grad_abs_error']:.1e}",
                         _fmt(step, " s"), _fmt(step / pred if step and pred else None, "x"),
                         {True: "bytes exact", False: "bytes MISMATCH", None: "-"}[exact]])
        return rows
    if exp == "collectives":
        rows = []
        for op, fit in result["fits"].items():
            best = max(r["busbw_Bps"] for r in result["table"] if r["op"] == op)
            rows.append([exp, op, status, f"alpha {fit['alpha_s'] * 1e6:.0f} us",
                         _fmt(best, " GB/s", 1e9), f"fit W {fit['busbw_Bps'] / 1e9:.3g} GB/s", "-"])
        return rows
    if exp == "gpt_mfu":
        return [[exp, f"{result['model']['params'] / 1e6:.1f}M {result['model']['dtype']}",
                 status, f"{result['tokens_per_s']:.4g} tok/s",
                 _fmt(result["achieved_flops"], " TFLOP/s", 1e12),
                 f"MFU {result['mfu'] * 100:.1f}%", result["peak_source"]]]
    if exp == "gemm_roofline":
        return [[exp, result["dtype"], status, "peak", _fmt(result["peak_flops"], " TFLOP/s", 1e12),
                 f"copy {result['copy_bandwidth_Bps'] / 1e9:.3g} GB/s",
                 f"ridge {result['ridge_point_flop_per_byte']:.3g} FLOP/B"]]
    return [[exp, "-", status, "-", "-", "-", "-"]]


def table(dirs: list[str]) -> str:
    header = ["experiment", "strategy/op", "status", "check", "measured", "vs predicted",
              "note"]
    rows = [header]
    for d in dirs:
        path = os.path.join(d, RESULT_FILE)
        if not os.path.exists(path):
            rows.append([os.path.basename(d.rstrip("/")), "-", "no result", "-", "-", "-", "-"])
            continue
        with open(path) as fh:
            rows.extend(rows_for(json.load(fh)))
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(header))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
             for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
