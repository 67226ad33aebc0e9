"""Page and search latency as the notebook grows, against a baseline in the same run.

    .venv/bin/python bench/web.py                 # N = 1k, 10k, 50k
    .venv/bin/python bench/web.py --sizes 1000 --requests 100

For each N: a fresh data directory is migrated and seeded with N entries (bulk inserts
of realistic bodies rendered once through the real pipeline), the real server
(`commonplace web`: gunicorn, gthread) is started on a free loopback port, and three
kinds of request are timed sequentially over one keep-alive connection:

  baseline  GET /healthz           a static answer through the same app and server
  entry     GET /entries/<id>/<slug>  random entries (auth, 3 queries, template)
  search    GET /search?q=…        words of varied frequency, a phrase, a prefix, a filter

It prints p50/p95 per kind and the ratios the issue sets targets for: entry/baseline
(< 3x), search p95 at the largest N (< 50 ms), and entry and search cost at the largest
N over the smallest (< 1.5x, i.e. flat). Timings are noisy on shared machines; compare
ratios within one run, not absolute numbers across runs.

Then the run views (skip with --no-views, or run only them with --sizes): a real CPU
pipeline run and a real ZeRO run (the lab under torchrun, as a runner starts it) stored as
the runner stores them, and timed the same way:

  plain     GET /runs/<id>?views=0   the run page without the sharding, timeline and
                                     traffic views (card, parameters, log, history)
  views     GET /runs/<id>           the same run's page with every view
  calc      GET /api/v1/calculator   the what-if calculator's JSON, presets and degrees varied

It prints views/plain (goal <= 2x) and the calculator's p95 (goal < 50 ms).
"""

from __future__ import annotations

import argparse
import datetime as dt
import http.client
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import sqlalchemy as sa  # noqa: E402

from app import create_app  # noqa: E402
from app import db as dbmod  # noqa: E402
from app.notebook.isoweeks import iso_week  # noqa: E402
from app.notebook.render import render  # noqa: E402
from tests.real_runs import store_run  # noqa: E402  (a finished run, stored as a runner does)

WORDS = ("pipeline tensor gradient bubble stage rank bandwidth latency collective reduce "
         "scatter gather broadcast shard optimizer activation memory checkpoint micro batch "
         "schedule interleave warmup steady cooldown megatron column row split attention "
         "head layer norm embedding vocabulary token sequence throughput flops roofline "
         "kernel fusion overlap bucket hook backward forward loss accuracy reading letter "
         "week notes garden coffee walk book paper idea question answer measure predict "
         "compare ratio dominant term interconnect nvlink infiniband ethernet gloo nccl").split()
RARE = [f"zq{i:05d}" for i in range(20000)]  # words that appear in a handful of entries
QUERIES = ["pipeline", "bubble schedule", '"tensor parallel"', "collect*", "nvlink -gloo",
           "tag:ml attention", "zq00042", "measure OR predict", "week:2024-W13", "kind:week"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def seed(data_dir: Path, n: int, rng: random.Random) -> list[tuple[int, str]]:
    app = create_app({"DATA_DIR": data_dir, "DATABASE_URL": f"sqlite:///{data_dir}/c.db",
                      "AUTH_MODE": "dev", "TIMEZONE": "UTC"})
    database = app.extensions["db"]
    dbmod.upgrade(database, data_dir / "backups")
    start = dt.date(2010, 1, 4)
    now = dt.datetime(2026, 1, 1)
    bodies = []
    for _ in range(200):  # 200 distinct rendered bodies, reused: rendering is not measured
        words = [rng.choice(WORDS) for _ in range(160)]
        words[rng.randrange(160)] = f"[[Note {rng.randrange(n)}]]"
        md = "## Notes\n\n" + " ".join(words[:80]) + "\n\n- " + " ".join(words[80:]) + " #ml\n"
        r = render(md)
        bodies.append((md, r.html, r.text))
    entries, fts, tags, links = [], [], [], []
    for i in range(n):
        day = start + dt.timedelta(days=i * 6000 // max(n, 1))
        md, html, text = bodies[i % len(bodies)]
        rare = RARE[i % len(RARE)]
        title = f"Note {i}"
        entries.append({"id": i + 1, "kind": "entry", "date": day, "iso_week": iso_week(day),
                        "title": title, "slug": f"note-{i}", "body_md": md + rare,
                        "body_html": html, "toc_html": "", "tags": "ml", "status": "published",
                        "revision": 1, "created_at": now, "updated_at": now})
        fts.append({"id": i + 1, "t": title, "g": "ml", "b": text + " " + rare})
        tags.append({"entry_id": i + 1, "tag": "ml"})
        links.append({"source_id": i + 1, "target_key": f"note {(i * 7) % n}", "text": "x",
                      "context": "context of the link"})
    with database.engine.begin() as conn:
        conn.execute(sa.text(
            "INSERT INTO entry (id, kind, date, iso_week, title, slug, body_md, body_html, "
            "toc_html, tags, status, revision, created_at, updated_at) VALUES (:id, :kind, "
            ":date, :iso_week, :title, :slug, :body_md, :body_html, :toc_html, :tags, :status, "
            ":revision, :created_at, :updated_at)"), entries)
        conn.execute(sa.text("INSERT INTO entry_fts (rowid, title, tags, body) "
                             "VALUES (:id, :t, :g, :b)"), fts)
        conn.execute(sa.text("INSERT INTO entry_tag (entry_id, tag) VALUES (:entry_id, :tag)"),
                     tags)
        conn.execute(sa.text("INSERT INTO link (source_id, target_key, text, context) "
                             "VALUES (:source_id, :target_key, :text, :context)"), links)
    with database.engine.connect() as conn:
        conn.exec_driver_sql("PRAGMA optimize")
    database.engine.dispose()
    return [(e["id"], e["slug"]) for e in entries]


def timed(conn: http.client.HTTPConnection, path: str) -> float:
    start = time.perf_counter()
    conn.request("GET", path)
    response = conn.getresponse()
    body = response.read()
    elapsed = time.perf_counter() - start
    if response.status != 200:
        raise RuntimeError(f"{path} answered {response.status}: {body[:200]!r}")
    return elapsed * 1000


def measure(port: int, ids, requests: int, rng: random.Random) -> dict[str, list[float]]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    paths = {
        "baseline": lambda: "/healthz",
        "entry": lambda: "/entries/{}/{}".format(*rng.choice(ids)),
        "search": lambda: "/search?q=" + rng.choice(QUERIES).replace(" ", "+")
        .replace('"', "%22"),
    }
    for kind in paths:  # warm up each path (template compile, page cache)
        for _ in range(10):
            timed(conn, paths[kind]())
    samples: dict[str, list[float]] = {k: [] for k in paths}
    for _ in range(requests):  # interleaved, so drift in machine load hits all kinds alike
        for kind, make in paths.items():
            samples[kind].append(timed(conn, make()))
    conn.close()
    return samples


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def run_size(n: int, requests: int, seed_value: int) -> dict[str, tuple[float, float]]:
    rng = random.Random(seed_value)
    data_dir = Path(tempfile.mkdtemp(prefix=f"cp-bench-{n}-"))
    try:
        t0 = time.perf_counter()
        ids = seed(data_dir, n, rng)
        seeded = time.perf_counter() - t0
        proc, port = start_web(data_dir)
        try:
            samples = measure(port, ids, requests, rng)
        finally:
            stop(proc)
        print(f"  N={n:>6}: seeded in {seeded:.1f}s, {requests} requests per kind", flush=True)
        return {k: (pct(v, 50), pct(v, 95)) for k, v in samples.items()}
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


VIEW_RUNS = {  # small enough for seconds on two cores, as the views' tests use
    "pipeline": {"world_size": 2, "micro_batches": 4, "hidden": 32, "heads": 4, "layers": 4,
                 "seq_len": 16, "vocab": 64, "batch_size": 8, "steps": 3, "warmup": 1,
                 "device": "cpu"},
    "zero": {"world_size": 2, "hidden": 32, "heads": 4, "layers": 4, "seq_len": 16,
             "vocab": 64, "batch_size": 8, "steps": 3, "warmup": 1, "device": "cpu"},
}
CALC_QUERIES = ["model=124m&gpu=h100&dp=8", "model=7b&gpu=h200&dp=8&zero=3",
                "model=70b&gpu=h100&tp=8&pp=4&dp=2&micro_batches=16",
                "model=1b&gpu=a100&pp=4&micro_batches=8", "model=7b&gpu=h100&tp=4&dp=2"]


def start_web(data_dir: Path) -> tuple[subprocess.Popen, int]:
    port = free_port()
    env = {**os.environ, "COMMONPLACE_DATA_DIR": str(data_dir),
           "COMMONPLACE_DATABASE_URL": f"sqlite:///{data_dir}/c.db",
           "COMMONPLACE_BIND": f"127.0.0.1:{port}", "COMMONPLACE_AUTH": "dev",
           "COMMONPLACE_TIMEZONE": "UTC"}
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", "web"], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while True:
        try:
            http.client.HTTPConnection("127.0.0.1", port, timeout=1).connect()
            return proc, port
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                stop(proc)
                raise RuntimeError("server did not start") from None
            time.sleep(0.2)


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def run_views(requests: int) -> None:
    data_dir = Path(tempfile.mkdtemp(prefix="cp-bench-views-"))
    try:
        app = create_app({"DATA_DIR": data_dir,
                          "DATABASE_URL": f"sqlite:///{data_dir}/c.db", "AUTH_MODE": "dev"})
        dbmod.upgrade(app.extensions["db"], data_dir / "backups")
        ids = {}
        for experiment, params in VIEW_RUNS.items():
            out = data_dir / f"lab-{experiment}"
            subprocess.run([sys.executable, "-m", "jobs.lab", "run", experiment, "--params",
                            json.dumps(params), "--out", str(out)], cwd=ROOT, check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            ids[experiment] = store_run(app, experiment, out)
        proc, port = start_web(data_dir)
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            rows = {}
            for experiment, run_id in ids.items():
                kinds = {"baseline": "/healthz", "plain": f"/runs/{run_id}?views=0",
                         "views": f"/runs/{run_id}"}
                for path in kinds.values():  # warm every worker's caches
                    for _ in range(5):
                        timed(conn, path)
                samples: dict[str, list[float]] = {k: [] for k in kinds}
                for _ in range(requests):  # interleaved: noise hits all alike
                    for kind, path in kinds.items():
                        samples[kind].append(timed(conn, path))
                rows[experiment] = {k: (pct(v, 50), pct(v, 95)) for k, v in samples.items()}
            calc = [timed(conn, "/api/v1/calculator?" + CALC_QUERIES[i % len(CALC_QUERIES)])
                    for i in range(requests * 2)]
        finally:
            stop(proc)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)

    print("\nrun page, ms (p50 / p95), one keep-alive connection to gunicorn")
    print(f"{'run':>9} | {'baseline':>15} | {'plain page':>15} | {'all views':>15} | "
          f"{'views/plain p50':>15} | {'p95':>6}")
    for experiment, r in rows.items():
        b, p, v = r["baseline"], r["plain"], r["views"]
        print(f"{experiment:>9} | {b[0]:6.2f} / {b[1]:6.2f} | {p[0]:6.2f} / {p[1]:6.2f} | "
              f"{v[0]:6.2f} / {v[1]:6.2f} | {v[0] / p[0]:14.2f}x | {v[1] / p[1]:5.2f}x"
              "   goal <= 2x")
    print(f"calculator GET /api/v1/calculator: p50 {pct(calc, 50):.2f} ms, "
          f"p95 {pct(calc, 95):.2f} ms over {len(calc)} requests   goal < 50 ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 50000])
    parser.add_argument("--no-views", action="store_true", help="skip the run views' part")
    parser.add_argument("--views-only", action="store_true", help="only the run views' part")
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    if args.views_only:
        run_views(args.requests)
        return
    results = {n: run_size(n, args.requests, args.seed) for n in args.sizes}

    print("\nlatency in ms (p50 / p95), over one keep-alive connection to gunicorn")
    print(f"{'N':>7} | {'baseline':>15} | {'entry page':>15} | {'search':>15} | "
          f"{'entry/base p50':>14} | {'entry/base p95':>14}")
    for n, r in results.items():
        b, e, s = r["baseline"], r["entry"], r["search"]
        print(f"{n:>7} | {b[0]:6.2f} / {b[1]:6.2f} | {e[0]:6.2f} / {e[1]:6.2f} | "
              f"{s[0]:6.2f} / {s[1]:6.2f} | {e[0] / b[0]:13.2f}x | {e[1] / b[1]:13.2f}x")
    small, large = min(results), max(results)
    rs, rl = results[small], results[large]
    grow = rl["entry"][0] / rs["entry"][0]
    moved = rl["baseline"][0] / rs["baseline"][0]
    print(f"\nentry page p50, N={large} over N={small}: {grow:.2f}x raw, {grow / moved:.2f}x "
          f"against the baseline (which moved {moved:.2f}x: machine noise)   target < 1.5x")
    print(f"search p50,     N={large} over N={small}: {rl['search'][0] / rs['search'][0]:.2f}x")
    print(f"search p95 at N={large}: {rl['search'][1]:.1f} ms (target < 50 ms)")
    if not args.no_views:
        run_views(args.requests)


if __name__ == "__main__":
    main()
