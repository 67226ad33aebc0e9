"""What starting a run's ranks costs: the lab's agent, which forks every rank with torch
and the experiment loaded (jobs/lab/launcher/elastic.py), against plain torchrun, which starts
each rank as a new Python, in the same run.

    .venv/bin/python bench/launch.py [--experiment zero] [--world-size 4] [--rounds 3]

Each round runs the same small experiment (tests/jobs/lab's sizes: one timed step, every
strategy of the experiment, the correctness gate first) once each way, in alternating
order, with the launcher's own environment (jobs/lab/launcher/launch.py), and times it end to end
and by the CPU of every process it started (getrusage of the children: torchrun or the
agent, and the ranks they waited for). It prints each round, the medians and their
ratio forked / plain. Both must succeed (result.json), or the round is refused.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from jobs.lab.catalogue import registry  # noqa: E402
from jobs.lab.launcher import launch  # noqa: E402

SMALL = {"hidden": 32, "heads": 4, "layers": 2, "seq_len": 16, "vocab": 64, "batch_size": 8,
         "steps": 1, "warmup": 0, "device": "cpu"}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def once(cmd: list[str], params: dict, out: Path) -> tuple[float, float]:
    """(seconds end to end, CPU seconds of every process started) of one run."""
    cpu, started = _children_cpu(), time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, env=launch.environment(params),
                          capture_output=True, text=True, timeout=600)
    seconds, cpu = time.monotonic() - started, _children_cpu() - cpu
    result = out / "result.json"
    if proc.returncode != 0 or json.loads(result.read_text())["status"] != "succeeded":
        raise SystemExit(f"{cmd[2]} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return seconds, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--experiment", default="zero", choices=sorted(registry.EXPERIMENTS))
    parser.add_argument("--world-size", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    params = registry.validate(args.experiment, {**SMALL, "world_size": args.world_size})
    times: dict[str, list[tuple[float, float]]] = {"plain": [], "forked": []}
    with tempfile.TemporaryDirectory(prefix="bench-launch-") as tmp:
        for n in range(args.rounds):
            for way in (("plain", "forked") if n % 2 == 0 else ("forked", "plain")):
                out = Path(tmp) / f"{way}{n}"
                cmd = launch.command(args.experiment, params, str(out))
                if way == "plain":  # the same flags, torchrun's own agent
                    cmd[cmd.index("jobs.lab.launcher.elastic")] = "torch.distributed.run"
                times[way].append(once(cmd, params, out))
                seconds, cpu = times[way][-1]
                print(f"round {n + 1} {way:>6}: {seconds:6.1f} s end to end, "
                      f"{cpu:6.1f} s CPU", flush=True)
    med = {way: (statistics.median(s for s, _ in t), statistics.median(c for _, c in t))
           for way, t in times.items()}
    print(f"\n{args.experiment} at world {args.world_size}, medians of {args.rounds}:")
    for way, (seconds, cpu) in med.items():
        print(f"  {way:>6}: {seconds:6.1f} s end to end, {cpu:6.1f} s CPU")
    print(f"  forked / plain: {med['forked'][0] / med['plain'][0]:.2f}x end to end, "
          f"{med['forked'][1] / med['plain'][1]:.2f}x CPU")


if __name__ == "__main__":
    main()
