"""Compute roofline: GEMM FLOP/s over square shapes and the transformer's own
shapes, a large copy for memory bandwidth, each GEMM placed against the bound
min(C_peak, intensity * BW). The best measured GEMM is the peak CPU MFU uses."""

from __future__ import annotations

import statistics
from typing import Any

import torch

from jobs.lab.components.context import Context
from jobs.lab.experiments.probes import copy_bandwidth, gemm_flops


def run(ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
    dtype = getattr(torch, params["dtype"])
    e = torch.finfo(dtype).bits // 8
    shapes = [(int(s), int(s), int(s)) for s in params["sizes"]]
    edge = max(int(s) for s in params["sizes"])
    shapes += [(edge, 4 * edge // 8 or 1, edge // 8 or 1)]  # a thin, memory-heavy GEMM
    bw = copy_bandwidth(ctx)
    rows = []
    for i, (M, N, K) in enumerate(shapes, 1):
        rate, times = gemm_flops(ctx, M, N, K, dtype=dtype, iters=params["iters"])
        intensity = 2 * M * N * K / ((M * K + K * N + M * N) * e)  # FLOP per byte
        rows.append({"M": M, "N": N, "K": K, "flops_per_s": rate,
                     "time_s": statistics.median(times), "intensity_flop_per_byte": intensity})
        ctx.progress(i, len(shapes), M=M, N=N, K=K, gflops=rate / 1e9)
    peak = max(r["flops_per_s"] for r in rows)
    for r in rows:
        bound = min(peak, r["intensity_flop_per_byte"] * bw)
        r["roofline_bound_flops"] = bound
        r["fraction_of_bound"] = r["flops_per_s"] / bound
        r["bound_by"] = "compute" if bound == peak else "memory"
    return {"dtype": params["dtype"], "peak_flops": peak, "copy_bandwidth_Bps": bw,
            "ridge_point_flop_per_byte": peak / bw, "table": rows,
            "formula": "t = max(2MNK / C, bytes / BW)"}
