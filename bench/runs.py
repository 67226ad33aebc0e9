"""The run list, its filters and sorts, and compare, at 10,000 finished runs.

    .venv/bin/python bench/runs.py                    # 10,000 runs
    .venv/bin/python bench/runs.py --runs 2000 --requests 100 --shapes /tmp/runs

A fresh data directory is migrated and filled with --runs finished runs whose results are
real lab outputs (every <shapes>/<experiment>/result.json, e.g. from
`python -m jobs.lab run <experiment> --out <shapes>/<experiment>`; the experiments the
kinds below filter and sort on — pipeline, zero, collectives, gpt_mfu — are run first on
CPU, small, when missing: a few minutes once, then kept) with every number varied per
run, stored through the product's own functions as a runner stores them (runs.create,
transitions, runs.store_result) in write transactions of 500 runs; creation times are
spread over ten years. Then:

1. in-process, the list's SQL before and after issue 14 (every column of the newest 100 —
   what the list loaded before — against the listing's columns), and the EXPLAIN QUERY
   PLAN of each query the list and its filters run;
2. a real server (`python -m app.cli web`: gunicorn, gthread, the repository's
   gunicorn.conf.py) driven sequentially over one keep-alive connection, then by
   --threads concurrent clients for --seconds: /healthz (the baseline), the newest 100
   (API and page), filtered by experiment and by a parameter, sorted by a result, filter
   and sort together, and compare of ten runs (page and API). It prints p50/p95, the p95
   over the baseline's, and the goal: p95 <= 25 ms for a list, <= 50 ms for compare.

bench/web.py's runs part (--runs there) is this file's `load_shapes`, `fill`, `kinds`,
`measure` and `report`, with bench/bare.py's bare+row as one more baseline kind.
The client shares the machine's cores with the server: compare ratios within one run.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import sqlalchemy as sa  # noqa: E402

from app import create_app, upgrades  # noqa: E402
from app.journal import run_query, runs  # noqa: E402
from app.models import Run  # noqa: E402
from bench.serving import drive, one_connection, pct, start_web, stop, timed  # noqa: E402
from tests.real_runs import PARAMS as LAB_PARAMS  # noqa: E402  (small CPU lab runs)

BATCH = 500
LIST_GOAL, COMPARE_GOAL = 25.0, 50.0
NEEDED = ("pipeline", "zero", "collectives", "gpt_mfu")  # the kinds filter and sort on these


def vary(value, rng: random.Random, scale: float):
    """The same shape, every float moved: a different run of the same experiment."""
    if isinstance(value, float):
        return value * scale * rng.uniform(0.9, 1.1)
    if isinstance(value, dict):
        return {k: vary(v, rng, scale) for k, v in value.items()}
    if isinstance(value, list):
        return [vary(v, rng, scale) for v in value]
    return value


def params_for(experiment: str, i: int, rng: random.Random) -> dict:
    params = {"seed": i % 100}
    if experiment not in ("collectives", "gemm_roofline"):
        params["steps"] = rng.randint(3, 20)
    if experiment == "pipeline":
        params["micro_batches"] = rng.choice([2, 4, 8])
    return params


def seed(app, shapes: dict[str, dict], n: int, rng: random.Random) -> None:
    database = app.extensions["db"]
    names = sorted(shapes)
    start = datetime(2016, 1, 4)
    for first in range(0, n, BATCH):
        with database.write() as session:
            for i in range(first, min(n, first + BATCH)):
                experiment = names[i % len(names)]
                run = runs.create(session, experiment, params_for(experiment, i, rng),
                                  actor="bench")
                run.created_at = start + timedelta(hours=i * 87600 / n)
                runs.transition(session, run, runs.LEASED, actor="runner:bench")
                runs.transition(session, run, runs.RUNNING, actor="runner:bench")
                runs.store_result(session, run, vary(shapes[experiment], rng,
                                                     rng.uniform(0.5, 1.5)))
                runs.transition(session, run, runs.SUCCEEDED, actor="runner:bench")
        print(f"  {min(n, first + BATCH)} runs stored", end="\r", flush=True)
    with database.engine.connect() as conn:
        conn.exec_driver_sql("PRAGMA optimize")
    print()


# -- what the database does ---------------------------------------------------------------

QUERIES = {  # kind -> run list arguments
    "newest": {},
    "experiment": {"experiment": "pipeline"},
    "param": {"param.micro_batches": "8"},
    "sort": {"sort": "step_time_s"},
    "filter+sort": {"experiment": "pipeline", "param.micro_batches": "8", "sort": "bubble"},
    "week": {"week": "2021-W10"},
    "param, all": {"param.device": "auto"},
    "narrow filter+sort": {"status": "failed", "sort": "mfu"},  # matches nothing
}


def sql_of(stmt) -> str:
    return str(stmt.compile(dialect=sa.dialects.sqlite.dialect(),
                            compile_kwargs={"literal_binds": True}))


def in_process(app, repeat: int) -> None:
    database = app.extensions["db"]
    print("\nin-process, the newest 100 (ms, median of", repeat, "):")
    with database.read() as session:
        def clock(fn) -> float:
            times = []
            for _ in range(repeat):
                session.expunge_all()
                t0 = time.perf_counter()
                fn()
                times.append((time.perf_counter() - t0) * 1000)
            return statistics.median(times)

        before = clock(lambda: list(session.scalars(
            sa.select(Run).order_by(Run.id.desc()).limit(101))))
        after = clock(lambda: run_query.listing({}).page(session, 100))
        print(f"  every column (the list before)   {before:8.2f}")
        print(f"  the listing's columns (now)      {after:8.2f}   {before / after:5.1f}x faster")
    print("\nEXPLAIN QUERY PLAN of the list's queries (limit 101), and the SQL's own time "
          "(median ms):")
    with database.engine.connect() as conn:
        for kind, args in QUERIES.items():
            sql = sql_of(run_query.listing(args).stmt.limit(101))
            plan = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + sql).all()
            times = []
            for _ in range(repeat):
                t0 = time.perf_counter()
                conn.exec_driver_sql(sql).all()
                times.append((time.perf_counter() - t0) * 1000)
            print(f"  {kind}: {args}  {statistics.median(times):.2f} ms")
            for row in plan:
                print(f"      {row[-1]}")


# -- the server ---------------------------------------------------------------------------


def kinds(n: int) -> dict[str, tuple[object, float]]:
    """kind -> (path maker, goal for its p95 in ms), over runs 1..n."""
    def ten(rng):
        return ",".join(str(i) for i in rng.sample(range(1, n + 1), 10))

    return {
        "healthz": (lambda rng: "/healthz", 0),
        "api newest 100": (lambda rng: "/api/v1/runs?limit=100", LIST_GOAL),
        "page newest 50": (lambda rng: "/runs", LIST_GOAL),
        "api experiment": (lambda rng: "/api/v1/runs?limit=100&experiment=" + rng.choice(
            ["pipeline", "zero", "collectives", "gpt_mfu"]), LIST_GOAL),
        "api param": (lambda rng: "/api/v1/runs?limit=100&param.micro_batches="
                      + rng.choice("248"), LIST_GOAL),
        "api param, all": (lambda rng: "/api/v1/runs?limit=100&param.device=auto",
                           LIST_GOAL),  # a parameter every run has: the widest filter
        "api week": (lambda rng: f"/api/v1/runs?limit=100&week={rng.randint(2016, 2025)}-W"
                     f"{rng.randint(10, 50)}", LIST_GOAL),
        "api sort": (lambda rng: "/api/v1/runs?limit=100&sort=" + rng.choice(
            ["step_time_s", "mfu", "bubble", "busbw_Bps", "peak_memory_bytes",
             "1f1b.step_time_s"]), LIST_GOAL),
        "api filter+sort": (lambda rng: "/api/v1/runs?limit=100&experiment=pipeline"
                            "&param.micro_batches=" + rng.choice("248") + "&sort="
                            + rng.choice(["bubble", "mfu", "step_time_s"]), LIST_GOAL),
        "page filter+sort": (lambda rng: "/runs?experiment=zero&params=steps%3D"
                             + str(rng.randint(3, 20)) + "&sort=peak_memory_bytes",
                             LIST_GOAL),
        "api next page": (lambda rng: "/api/v1/runs?limit=100&sort=mfu&cursor="
                          + f"{rng.uniform(0.01, 0.3)!r},{n}", LIST_GOAL),
        "page compare 10": (lambda rng: "/runs/compare?ids=" + ten(rng), COMPARE_GOAL),
        "api compare 10": (lambda rng: "/api/v1/compare?ids=" + ten(rng), COMPARE_GOAL),
    }


Table = dict[str, tuple[list[float], list[float], float]]  # kind -> (seq, busy, goal)


def measure(every: dict[str, tuple[int, object, float]], requests: int, seconds: float,
            threads: int, seed: int) -> tuple[Table, float]:
    """every: kind -> (port, path maker, goal). Each kind warmed, then `requests` rounds of
    every kind in turn over one keep-alive connection per server (interleaved: a noisy
    neighbour hits every kind alike), then `threads` concurrent clients for `seconds` per
    kind. Returns the table and the highest load average seen while sequential."""
    rng = random.Random(seed)
    conns = {port: one_connection(port) for port, _, _ in every.values()}
    try:
        for port, make, _ in every.values():
            for _ in range(10):  # warm: templates, caches
                timed(conns[port], make(rng))
            drive(port, make, 0.3, threads)  # every worker thread warm
        for port in conns:  # fresh ones: gunicorn drops idle keep-alives
            conns[port].close()
            conns[port] = one_connection(port)
        seq: dict[str, list[float]] = {kind: [] for kind in every}
        load = os.getloadavg()[0]
        for _ in range(requests):
            for kind, (port, make, _) in every.items():
                seq[kind].append(timed(conns[port], make(rng)))
        load = max(load, os.getloadavg()[0])
    finally:
        for conn in conns.values():
            conn.close()
    table = {kind: (seq[kind], drive(port, make, seconds, threads)[1], goal)
             for kind, (port, make, goal) in every.items()}
    return table, load


def report(table: Table, bases: list[str], requests: int, seconds: float, threads: int,
           load: float) -> None:
    """p50/p95 sequential and busy, each p95 over each base kind's p95, and the goals."""
    print(f"\nload average during the sequential part: up to {load:.1f} "
          f"on {os.cpu_count()} cores (others' work on this machine skews p95)")
    over = " ".join(f"{'x ' + b:>{max(8, len(b) + 2)}}" for b in bases)
    print(f"\nsequential ({requests} requests, one keep-alive connection) and {threads} "
          f"concurrent clients for {seconds:g}s; ms; x = p95 over {' / '.join(bases)}'s p95")
    print(f"  {'kind':<17} {'p50':>7} {'p95':>7} {over} {'goal':>6}       | "
          f"{'busy p50':>8} {'p95':>7} {over}  n")
    for kind, (seq, busy, goal) in table.items():
        p95, busy95 = pct(seq, 95), pct(busy, 95)
        verdict = "" if not goal else ("ok" if p95 <= goal else "MISS")
        seq_x = " ".join(f"{p95 / pct(table[b][0], 95):{max(8, len(b) + 2) - 1}.1f}x"
                         for b in bases)
        busy_x = " ".join(f"{busy95 / pct(table[b][1], 95):{max(8, len(b) + 2) - 1}.1f}x"
                          for b in bases)
        print(f"  {kind:<17} {pct(seq, 50):7.2f} {p95:7.2f} {seq_x} {goal or '':>6} "
              f"{verdict:<4} | {pct(busy, 50):8.2f} {busy95:7.2f} {busy_x}  {len(busy)}")


def serve(data_dir: Path, n: int, args) -> None:
    proc, port = start_web(data_dir)
    try:
        every = {kind: (port, make, goal) for kind, (make, goal) in kinds(n).items()}
        table, load = measure(every, args.requests, args.seconds, args.threads, args.seed)
    finally:
        stop(proc)
    report(table, ["healthz"], args.requests, args.seconds, args.threads, load)


# -- the runs -----------------------------------------------------------------------------


def load_shapes(folder: Path) -> dict[str, dict]:
    """Every <folder>/<experiment>/result.json; the experiments the kinds filter and sort on
    that are missing are run first (the lab under torchrun on CPU, small: minutes)."""
    for experiment in NEEDED:
        out = folder / experiment
        if not (out / "result.json").exists():
            print(f"  running the lab's {experiment} on CPU for its result's shape "
                  f"into {out}", flush=True)
            subprocess.run([sys.executable, "-m", "jobs.lab", "run", experiment, "--params",
                            json.dumps(LAB_PARAMS[experiment]), "--out", str(out),
                            "--timeout", "240"], cwd=ROOT, check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return {p.parent.name: json.loads(p.read_text())
            for p in sorted(folder.glob("*/result.json"))}


def fill(data_dir: Path, n: int, shapes: dict[str, dict], seed_: int):
    """A migrated data directory (<data_dir>/c.db) with n finished runs; returns the app
    (dispose its engine before a server opens the file)."""
    app = create_app({"DATA_DIR": data_dir, "DATABASE_URL": f"sqlite:///{data_dir}/c.db",
                      "AUTH_MODE": "dev", "TIMEZONE": "UTC"})
    upgrades.upgrade(app.extensions["db"], data_dir / "backups")
    t0 = time.perf_counter()
    seed(app, {k: copy.deepcopy(v) for k, v in shapes.items()}, n, random.Random(seed_))
    size = (data_dir / "c.db").stat().st_size / 1e6
    print(f"{n} runs stored in {time.perf_counter() - t0:.0f}s (database {size:.0f} MB)")
    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--shapes", type=Path, default=Path("/tmp/runs"),
                        help="a folder of <experiment>/result.json (real lab outputs)")
    parser.add_argument("--requests", type=int, default=200, help="sequential, per kind")
    parser.add_argument("--seconds", type=float, default=3.0, help="concurrent, per kind")
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--seed", type=int, default=14)
    parser.add_argument("--keep", action="store_true", help="keep the data directory")
    args = parser.parse_args()
    shapes = load_shapes(args.shapes)
    print(f"result shapes from {args.shapes}: {', '.join(sorted(shapes))}")
    data_dir = Path(tempfile.mkdtemp(prefix="cp-bench-runs-"))
    try:
        app = fill(data_dir, args.runs, shapes, args.seed)
        in_process(app, 20)
        app.extensions["db"].engine.dispose()
        serve(data_dir, args.runs, args)
    finally:
        if args.keep:
            print("data kept in", data_dir)
        else:
            shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
