"""Single-device GPT throughput and MFU (nanoGPT / picotron formula):
    MFU = tokens/s * (6N + 12*L*h*s) / peak
with N the matmul parameters (a tied head's weight counted once) and s the real
sequence length, timed after a device synchronize with warm-up steps excluded.
Peak, named in the result: for a bf16 run on H100/H200 989 TFLOP/s dense (not the
2:4-sparse 1979), A100 312; otherwise (fp32, CPU, another GPU) the measured GEMM
peak of the run's dtype, probed again after every timed step and the best try kept (a
try on a shared machine is only ever slowed); an MFU above 100% is marked invalid."""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch

from jobs.lab.components.context import Context
from jobs.lab.components.model import ModelConfig, build_model, loss_fn, make_batch
from jobs.lab.components.optim import SGD
from jobs.lab.experiments import timing
from jobs.lab.experiments.probes import peak_for, peak_sample


def run(ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
    cfg = ModelConfig(kind="gpt", layers=params["layers"], hidden=params["hidden"],
                      heads=params["heads"], seq_len=params["seq_len"], vocab=params["vocab"],
                      dtype=params["dtype"], seed=params["seed"],
                      tie_head=params.get("tie_head", False))
    model = build_model(cfg, ctx.device)
    opt = SGD(list(model.parameters()))
    batch = make_batch(cfg, params["batch_size"]).to(ctx.device)
    loss_of = loss_fn("gpt")
    tokens = params["batch_size"] * cfg.seq_len
    fpt = cfg.flops_per_token()
    peak, peak_source = peak_for(ctx, params["dtype"], params["peak_tflops"])
    samples = [peak] if peak_source.startswith("measured") else []
    if ctx.is_cuda:
        torch.cuda.reset_peak_memory_stats(ctx.device)
    times, losses = [], []
    total = params["warmup"] + params["steps"]
    for i in range(total):
        ctx.sync()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = loss_of(model(batch.inputs), batch.targets)
        loss.backward()
        opt.step()
        losses.append(loss.item())  # .item() synchronizes too
        ctx.sync()
        dt = time.perf_counter() - t0
        if i >= params["warmup"]:
            times.append(dt)
            if samples:
                samples.append(peak_sample(ctx, params["dtype"]))
                peak = max(samples)
        ctx.progress(i + 1, total, phase="timed" if i >= params["warmup"] else "warmup",
                     step_time_s=dt, tokens_per_s=tokens / dt,
                     mfu=tokens / dt * fpt / peak)
    step = statistics.median(times)
    s = sorted(times)
    spread = timing.spread(times)
    mfu = tokens / step * fpt / peak
    return {
        "model": {**cfg.as_dict(), "params": cfg.param_count(),
                  "matmul_params": cfg.matmul_params()},
        "flops_per_token": fpt,
        "tokens_per_step": tokens,
        "step_time_s": {"median": step, "p10": s[int(0.1 * (len(s) - 1))],
                        "p90": s[int(0.9 * (len(s) - 1))],
                        **{k: spread[k] for k in ("n", "q1", "q3", "iqr_fraction",
                                                  "outliers")}},
        "tokens_per_s": tokens / step,
        "achieved_flops": tokens / step * fpt,
        "peak_flops": peak,
        "peak_source": peak_source,
        "peak_name": peak_source,
        "peak_samples": samples,
        "mfu": mfu,
        "mfu_valid": mfu <= 1.0,
        "invalid": timing.validity(mfu, step, 0.0, samples),
        "loss_first_last": [losses[0], losses[-1]],
        "cuda_max_memory_allocated": torch.cuda.max_memory_allocated(ctx.device)
        if ctx.is_cuda else None,
        "formula": "MFU = tokens/s * (6N + 12*L*h*s) / peak",
    }
