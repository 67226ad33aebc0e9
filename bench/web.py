"""Every page kind's cost as the notebook grows, against baselines in the same run.

    .venv/bin/python bench/web.py                       # N = 1k, 10k, 100k
    .venv/bin/python bench/web.py --sizes 1000 --seconds 2 --no-views
    .venv/bin/python bench/web.py --views-only          # only the run views' part

For each N: a fresh data directory is migrated and seeded with N entries (bulk SQL
inserts of realistic bodies rendered once through the real pipeline: `seed` below; the
product's own import is not used for the corpus yet), and three servers are started,
each gunicorn with the repository's gunicorn.conf.py (gthread, same workers and threads)
on a free loopback port:

  bare        bench/bare.py  GET /     bare Flask, a constant answer
  bare+row    bench/bare.py  GET /row  bare Flask + one SQLite row + a template: the
                                       baseline every page is compared with
  the app     `commonplace web`, the real server:
    healthz   GET /healthz
    entry     GET /entries/<id>/<slug>      random entries
    api       GET /api/v1/entries/<id>      random entries
    home      GET /
    letter    GET /weeks/<this week>        this week's letter
    sitemap   GET /sitemap                  (the newest year)
    tag       GET /tags/ml                  a tag every entry carries (the worst case)
    search    GET /search?q=…               varied queries

Each kind is driven for --seconds by --concurrency client threads, each with its own
keep-alive connection (the load a browser tab per user makes), and then sequentially
over one connection. It prints req/s, p50 and p99 under concurrency, the sequential p50,
the cost ratio to bare+row (its req/s over the kind's: the issue's goal is <= 2x at the
largest N) and, per kind, that ratio at the largest N over the smallest (goal <= 1.2:
flat). The client shares the machine's cores with the servers, as wrk would; compare
ratios within one run, not absolute numbers across runs.

Then the run views (skip with --no-views, or run only them with --views-only): a real CPU
pipeline run and a real ZeRO run (the lab under torchrun, as a runner starts it) stored as
the runner stores them, and timed sequentially:

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
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import sqlalchemy as sa  # noqa: E402

from app import create_app, upgrades  # noqa: E402
from app.notebook.isoweeks import iso_week  # noqa: E402
from app.notebook.render import render  # noqa: E402
from app.web.auth.identity import hash_token  # noqa: E402
from bench.serving import (  # noqa: E402
    free_port,
    insert_notes,
    pct,
    start_web,
    stop,
    timed,
    wait_listening,
)
from tests.real_runs import store_run  # noqa: E402  (a finished run, stored as a runner does)

WORDS = ("pipeline tensor gradient bubble stage rank bandwidth latency collective reduce "
         "scatter gather broadcast shard optimizer activation memory checkpoint micro batch "
         "schedule interleave warmup steady cooldown megatron column row split attention "
         "head layer norm embedding vocabulary token sequence throughput flops roofline "
         "kernel fusion overlap bucket hook backward forward loss accuracy reading letter "
         "week notes garden coffee walk book paper idea question answer measure predict "
         "compare ratio dominant term interconnect nvlink infiniband ethernet gloo nccl").split()
RARE = [f"zq{i:05d}" for i in range(20000)]  # words that appear in a handful of entries
TOKEN = "cp_bench-token-for-the-api-kind"  # an owner token `seed` stores
QUERIES = ["pipeline", "bubble schedule", '"tensor parallel"', "collect*", "nvlink -gloo",
           "tag:ml attention", "zq00042", "measure OR predict", "week:2024-W13", "kind:week"]


def seed(data_dir: Path, n: int, rng: random.Random) -> list[tuple[int, str]]:
    app = create_app({"DATA_DIR": data_dir, "DATABASE_URL": f"sqlite:///{data_dir}/c.db",
                      "AUTH_MODE": "dev", "TIMEZONE": "UTC"})
    database = app.extensions["db"]
    upgrades.upgrade(database, data_dir / "backups")
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
        insert_notes(conn, entries, fts, tags)
        conn.execute(sa.text("INSERT INTO link (source_id, target_key, text, context) "
                             "VALUES (:source_id, :target_key, :text, :context)"), links)
        conn.execute(sa.text("INSERT INTO token (name, role, token_hash, created_at) "
                             "VALUES ('bench', 'owner', :h, :now)"),
                     {"h": hash_token(TOKEN), "now": now})
    with database.engine.connect() as conn:
        conn.exec_driver_sql("PRAGMA optimize")
    database.engine.dispose()
    return [(e["id"], e["slug"]) for e in entries]


def one_connection(port: int) -> http.client.HTTPConnection:
    return http.client.HTTPConnection("127.0.0.1", port, timeout=60)


def drive(port: int, make_path, seconds: float, threads: int) -> tuple[float, list[float]]:
    """`threads` clients, each on its own keep-alive connection, for `seconds`:
    (requests per second, latencies in ms)."""
    stop_at = time.perf_counter() + seconds
    samples: list[list[float]] = [[] for _ in range(threads)]

    def client(i: int) -> None:
        rng = random.Random(i)
        conn = one_connection(port)
        while time.perf_counter() < stop_at:
            samples[i].append(timed(conn, make_path(rng)))
        conn.close()

    start = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(client, range(threads)))
    elapsed = time.perf_counter() - start
    flat = [x for row in samples for x in row]
    return len(flat) / elapsed, flat


def kinds(ids, week: str) -> dict[str, tuple[str, object]]:
    """kind -> (server, path maker)."""
    def entry(rng):
        return "/entries/{}/{}".format(*rng.choice(ids))

    def api(rng):  # as a script or the CLI calls it: with a token
        return f"/api/v1/entries/{rng.choice(ids)[0]}", {"Authorization": f"Bearer {TOKEN}"}

    def search(rng):
        return "/search?q=" + rng.choice(QUERIES).replace(" ", "+").replace('"', "%22")

    return {"bare": ("bare", lambda rng: "/"), "bare+row": ("bare", lambda rng: "/row"),
            "healthz": ("app", lambda rng: "/healthz"), "entry": ("app", entry),
            "api": ("app", api), "home": ("app", lambda rng: "/"),
            "letter": ("app", lambda rng: f"/weeks/{week}"),
            "sitemap": ("app", lambda rng: "/sitemap"),
            "tag": ("app", lambda rng: "/tags/ml"), "search": ("app", search)}


def start_bare(data_dir: Path) -> tuple[subprocess.Popen, int]:
    port = free_port()
    env = {**os.environ, "BENCH_DB": str(data_dir / "c.db")}
    proc = subprocess.Popen([sys.executable, "-m", "gunicorn", "-c", "gunicorn.conf.py",
                             "--bind", f"127.0.0.1:{port}", "bench.bare:app"], cwd=ROOT,
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_listening(proc, port)
    return proc, port


def run_size(n: int, args) -> dict[str, dict[str, float]]:
    rng = random.Random(args.seed)
    data_dir = Path(tempfile.mkdtemp(prefix=f"cp-bench-{n}-"))
    try:
        t0 = time.perf_counter()
        ids = seed(data_dir, n, rng)
        seeded = time.perf_counter() - t0
        week = iso_week(dt.datetime.now(dt.UTC).date())
        servers = dict(zip(("bare", "app"), (start_bare(data_dir), start_web(data_dir)),
                           strict=True))
        results = {}
        try:
            for kind, (server, make) in kinds(ids, week).items():
                port = servers[server][1]
                conn = one_connection(port)
                for _ in range(10):  # warm up: template compile, caches, connections
                    timed(conn, make(rng))
                drive(port, make, 0.5, args.concurrency)  # every worker thread warm
                conn.close()
                rps, lat = drive(port, make, args.seconds, args.concurrency)
                conn = one_connection(port)  # a fresh one: gunicorn drops idle keep-alives
                seq = [timed(conn, make(rng)) for _ in range(args.requests)]
                conn.close()
                results[kind] = {"rps": rps, "p50": pct(lat, 50), "p99": pct(lat, 99),
                                 "seq": pct(seq, 50), "n": len(lat)}
        finally:
            for proc, _ in servers.values():
                stop(proc)
        print(f"  N={n:>6}: seeded in {seeded:.1f}s", flush=True)
        return results
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


def report(results: dict[int, dict[str, dict[str, float]]], concurrency: int) -> None:
    print(f"\nunder {concurrency} concurrent keep-alive clients (req/s, p50, p99 in ms), "
          "sequential p50, and cost against bare+row (its req/s over the kind's)")
    for n, r in results.items():
        base = r["bare+row"]["rps"]
        print(f"\nN={n}")
        print(f"  {'kind':<9} {'req/s':>8} {'p50':>8} {'p99':>8} {'seq p50':>8} "
              f"{'x bare+row':>11}")
        for kind, m in r.items():
            print(f"  {kind:<9} {m['rps']:8.0f} {m['p50']:8.1f} {m['p99']:8.1f} "
                  f"{m['seq']:8.2f} {base / m['rps']:10.2f}x")
    small, large = min(results), max(results)
    print(f"\nper kind: x bare+row at N={large} (goal <= 2x) and that ratio at N={large} "
          f"over N={small} (goal <= 1.2: flat)")
    for kind in results[large]:
        at = {n: results[n]["bare+row"]["rps"] / results[n][kind]["rps"] for n in results}
        print(f"  {kind:<9} {at[large]:6.2f}x   {at[large] / at[small]:6.2f}")


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


def run_views(requests: int) -> None:
    data_dir = Path(tempfile.mkdtemp(prefix="cp-bench-views-"))
    try:
        app = create_app({"DATA_DIR": data_dir,
                          "DATABASE_URL": f"sqlite:///{data_dir}/c.db", "AUTH_MODE": "dev"})
        upgrades.upgrade(app.extensions["db"], data_dir / "backups")
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
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    parser.add_argument("--no-views", action="store_true", help="skip the run views' part")
    parser.add_argument("--views-only", action="store_true", help="only the run views' part")
    parser.add_argument("--seconds", type=float, default=4, help="per kind, concurrent")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--requests", type=int, default=300, help="per kind, sequential")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    if args.views_only:
        run_views(args.requests)
        return
    results = {n: run_size(n, args) for n in args.sizes}
    report(results, args.concurrency)
    if not args.no_views:
        run_views(args.requests)


if __name__ == "__main__":
    main()
