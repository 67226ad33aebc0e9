"""Parallelism lab benchmark: hand-written strategies against PyTorch's own, measured
in the same run on the same machine, printed as ratios (absolute times on a shared
CPU box mean little).

    .venv/bin/python bench/lab.py [--world-size 2] [--steps 10] [--keep DIR]

1. hand data parallel (naive, bucketed) vs DistributedDataParallel   (target <= 1.15x)
2. hand 1F1B (and GPipe) vs torch.distributed.pipelining's schedules  (target <= 1.15x)
3. hand Megatron TP vs DTensor Colwise/RowwiseParallel               (target <= 1.15x)
4. pipeline bubble: measured idle fraction vs (p-1)/(m+p-1) across m
5. the instrumentation wrapper's overhead on a raw all_reduce loop    (target < 5%)
Every run goes through the launcher, so each strategy also passed the correctness gate.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODEL = {"hidden": 256, "heads": 8, "layers": 8, "seq_len": 64, "vocab": 512,
         "batch_size": 16, "device": "cpu"}


def run(experiment: str, params: dict, out: Path) -> dict:
    proc = subprocess.run([sys.executable, "-m", "jobs.lab", "run", experiment, "--params",
                           json.dumps(params), "--out", str(out), "--timeout", "600"],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        sys.exit(f"{experiment} failed ({proc.returncode}): {proc.stderr.strip()[-500:]}")
    return json.loads((out / "result.json").read_text())


def steps_of(result: dict) -> dict[str, dict]:
    return {s["strategy"]: s for s in result["strategies"]}


def ratio_line(label: str, mine: dict, theirs: dict, target: float = 1.15) -> str:
    a, b = mine["step_time_s"], theirs["step_time_s"]
    r = a["median"] / b["median"]
    verdict = "ok" if r <= target else f"above {target}x"
    return (f"{label:<34} {r:6.3f}x  ({a['median'] * 1e3:7.2f} ms [p10 {a['p10'] * 1e3:.2f}, "
            f"p90 {a['p90'] * 1e3:.2f}] vs {b['median'] * 1e3:7.2f} ms [p10 "
            f"{b['p10'] * 1e3:.2f}, p90 {b['p90'] * 1e3:.2f}])  {verdict}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--world-size", type=int, default=2)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--keep", type=Path, default=None, help="keep result directories here")
    args = ap.parse_args()
    base = args.keep or Path(tempfile.mkdtemp(prefix="bench_lab_"))
    base.mkdir(parents=True, exist_ok=True)
    w = args.world_size
    common = {**MODEL, "world_size": w, "steps": args.steps, "warmup": 3}

    print(f"parallelism lab bench: world_size={w}, gloo on CPU, model {MODEL}, "
          f"{args.steps} timed steps (median, p10/p90)")
    print("\n== hand-written / PyTorch step time (lower is better for the hand version)")
    dp = steps_of(run("data_parallel", {**common, "strategies": ["dp_naive", "dp_bucket", "ddp"],
                                        "bucket_cap_mb": 1.0}, base / "dp"))
    print(ratio_line("dp_bucket / ddp", dp["dp_bucket"], dp["ddp"]))
    print(ratio_line("dp_naive / ddp", dp["dp_naive"], dp["ddp"]))

    pp = steps_of(run("pipeline", {**common, "micro_batches": 4,
                                   "strategies": ["1f1b", "torch_1f1b", "gpipe", "torch_gpipe"]},
                      base / "pp"))
    print(ratio_line("1f1b / torch Schedule1F1B", pp["1f1b"], pp["torch_1f1b"]))
    print(ratio_line("gpipe / torch ScheduleGPipe", pp["gpipe"], pp["torch_gpipe"]))

    tp = steps_of(run("tensor_parallel", {**common, "strategies": ["tp_megatron", "tp_dtensor"]},
                      base / "tp"))
    print(ratio_line("tp_megatron / DTensor TP", tp["tp_megatron"], tp["tp_dtensor"]))

    print("\n== pipeline bubble: measured idle fraction vs (p-1)/(m+p-1), p = "
          f"{w}, same global batch")
    print(f"{'m':>3} {'schedule':<9} {'predicted':>9} {'measured':>9} {'ratio':>7} "
          f"{'step ms':>8} {'dominant term':>14}")
    for m in (1, 2, 4, 8):
        names = ["gpipe"] if m < w else ["gpipe", "1f1b"]
        res = steps_of(run("pipeline", {**common, "micro_batches": m, "strategies": names},
                           base / f"bubble_m{m}"))
        for name in names:
            b = res[name]["bubble"]
            print(f"{m:>3} {name:<9} {b['predicted']:>9.3f} {b['measured_idle_fraction']:>9.3f} "
                  f"{b['ratio']:>7.2f} {res[name]['step_time_s']['median'] * 1e3:>8.2f} "
                  f"{res[name]['dominant_term']:>14}")

    print("\n== instrumentation overhead on a raw all_reduce loop (smallest message = worst)")
    for size in (1024, 65536):
        coll = run("collectives", {"world_size": w, "device": "cpu", "ops": ["all_reduce"],
                                   "min_bytes": size, "max_bytes": size, "iters": 3,
                                   "measure_overhead": True}, base / f"overhead_{size}")
        o = coll["wrapper_overhead"]
        print(f"all_reduce {size:>6} B: raw {o['raw_s'] * 1e6:8.1f} us, wrapped "
              f"{o['wrapped_s'] * 1e6:8.1f} us (median of {o['pairs']} alternating pairs): "
              f"loop overhead {o['overhead'] * 100:+.2f}% "
              f"{'ok' if o['overhead'] < 0.05 else 'above 5%'}; wrapper bookkeeping "
              f"{o['bookkeeping_s'] * 1e6:.2f} us/op = {o['bookkeeping_fraction'] * 100:.2f}%")
    print(f"\nresults in {base}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
