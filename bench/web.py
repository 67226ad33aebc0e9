"""Every page kind's cost as the notebook grows, against baselines in the same run.

    .venv/bin/python bench/web.py                       # N = 1k, 10k, 100k; 10k runs
    .venv/bin/python bench/web.py --sizes 1000 --seconds 2 --runs 0 --no-views
    .venv/bin/python bench/web.py --views-only          # only the run views' part
    .venv/bin/python bench/web.py --accept-encoding 'gzip, deflate, br'   # as a browser asks

For each N (--sizes): bench/importing.py writes N markdown files in the mirror's format
(a Zipf vocabulary, tags, wiki links, code blocks, a letter a week) and the product's own
`commonplace import DIR` loads them into a fresh data directory, timed end to end, with
the parse-only baseline (read and parse the same files, one process) measured alongside
(bench/corpus.py). An owner token is made with `commonplace token create`. Then three
servers, each gunicorn with the repository's gunicorn.conf.py (gthread, same workers and
threads) on a free loopback port:

  bare        bench/bare.py  GET /     bare Flask, a constant answer
  bare+row    bench/bare.py  GET /row  bare Flask + one SQLite row + a template: the
                                       baseline every page is compared with
  the app     `commonplace web`, the real server, on the imported database, with an idle
              runner agent polling it for work, as `commonplace up` runs one. Its polls,
              its runs and a token's use commit to the database but not to the notebook,
              and the kept pages must not take them for a change: before the runner
              starts, the kept pages are viewed as they are, then each view right after
              such a commit (the runner registering again), and both p50s printed:
    healthz   GET /healthz
    entry     GET /entries/<id>/<slug>      random imported entries
    api       GET /api/v1/entries/<id>      random imported entries, with the token
    home      GET /
    letter    GET /weeks/<this week>        this week's letter (the app makes it)
    sitemap   GET /sitemap                  (the newest year)
    tag       GET /tags/<most common tag>   the worst case; the output names it
    home* letter* sitemap* tag*             the same pages, each request with a query
                                            argument of its own (?n=<random>): these four
                                            are kept whole between views while nothing
                                            changes (app/web/pages/kept.py), so the starred
                                            kinds are what a rendering costs
    search    GET /search?q=…               words of the imported vocabulary (common,
                                            rare, prefixes, a phrase, OR, -word) and
                                            the tag:, week:, kind: filters

Last, with the pages measured, saves through the API with and without [[links]] (saving.py).

Each kind is driven for --seconds by --concurrency client threads, each with its own
keep-alive connection (the load a browser tab per user makes), in --rounds slices with
the kinds' order reversed every other round (so a drift in the machine's speed cancels
from the ratios; the report shows bare+row's rate in each round), and then sequentially
over one connection. It prints req/s, p50 and p99 under concurrency, the sequential p50
and p95, the cost ratio to bare+row (its req/s over the kind's) and, per kind, that ratio
at the largest N over the smallest. Beside them, the server's CPU per request under that
load (gunicorn's master and workers, from /proc) and its ratio to bare+row's: the load
generator runs on the same cores, so the req/s ratio understates a page's own cost. For
the import: entries/s, import/baseline and the rate at the largest N over the rate at
the smallest. The goals (issue 14): every page kind <= 2x bare+row at 100k and its
100k/1k ratio <= 1.2; 100k entries imported in <= 120 s (about 1,000 entries/s), the
rate flat with N; ranked search p95 <= 22 ms at 100k.

Then the runs (--runs, default 10,000; --runs 0 skips them): bench/runs.py's data
directory of finished runs stored through the product's own functions and its kinds
(newest 100 by API and page, filtered by experiment and by a parameter, sorted by a
result, filter and sort together, compare of ten), sequential p50/p95 against the goals
(a list p95 <= 25 ms, compare <= 50 ms), then under --concurrency clients, with each p95
over /healthz's and over a bare+row server's on the same database (bench/runs.py).

Then the run views (skip with --no-views, or run only them with --views-only): a real CPU
pipeline run and a real ZeRO run (the lab under torchrun, as a runner starts it) stored as
the runner stores them, and timed sequentially:

  plain     GET /runs/<id>?views=0   the run page without the sharding, timeline and
                                     traffic views (card, parameters, log, history)
  views     GET /runs/<id>           the same run's page with every view
  calc      GET /api/v1/calculator   the what-if calculator's JSON, presets and degrees varied

It prints views/plain (goal <= 2x) and the calculator's p95 (goal < 50 ms).

The client shares the machine's cores with the servers, as wrk would; nothing here asserts
a timing: compare ratios within one run, not absolute numbers across runs.
"""

from __future__ import annotations

import argparse
import datetime as dt
import http.client
import json
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from urllib.parse import quote

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app import create_app, upgrades  # noqa: E402
from app.notebook.isoweeks import iso_week  # noqa: E402
from bench import runs, saving, serving  # noqa: E402
from bench.corpus import DATABASE, Corpus, build, cli_token  # noqa: E402
from bench.serving import (  # noqa: E402
    drive,
    journal_commit,
    kept_views,
    one_connection,
    pct,
    server_cpu,
    start_bare,
    start_runner,
    start_web,
    stop,
    timed,
)
from bench.web_report import report, report_import, report_polls  # noqa: E402
from tests.real_runs import store_run  # noqa: E402  (a finished run, stored as a runner does)


def kept_pages(corpus: Corpus, week: str) -> dict[str, str]:
    """The pages kept whole between views while the notebook does not change."""
    return {"home": "/", "letter": f"/weeks/{week}", "sitemap": "/sitemap",
            "tag": "/tags/" + quote(corpus.tag)}


def kinds(corpus: Corpus, week: str) -> dict[str, tuple[str, object]]:
    """kind -> (server, path maker)."""
    def entry(rng):
        return "/entries/{}/{}".format(*rng.choice(corpus.entries))

    def api(rng):  # as a script or the CLI calls it: with a token
        return (f"/api/v1/entries/{rng.choice(corpus.entries)[0]}",
                {"Authorization": f"Bearer {corpus.token}"})

    def search(rng):
        return "/search?q=" + quote(rng.choice(corpus.queries), safe="")

    def fresh(path: str):  # a query argument the view ignores: a new URL, rendered
        return lambda rng: f"{path}{'&' if '?' in path else '?'}n={rng.getrandbits(48)}"

    pages = kept_pages(corpus, week)
    return {"bare": ("bare", lambda rng: "/"), "bare+row": ("bare", lambda rng: "/row"),
            "healthz": ("app", lambda rng: "/healthz"), "entry": ("app", entry),
            "api": ("app", api),
            **{kind: ("app", lambda rng, path=path: path) for kind, path in pages.items()},
            **{f"{kind}*": ("app", fresh(path)) for kind, path in pages.items()},
            "search": ("app", search)}


def run_size(n: int, args) -> tuple[Corpus, dict, dict[str, tuple[float, float]],
                                    tuple[float, float]]:
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix=f"cp-bench-{n}-"))
    try:
        corpus = build(work, n, args.seed)
        print(f"  N={n:>6}: wrote {corpus.write_s:.1f}s, parsed {corpus.baseline_s:.1f}s, "
              f"imported {corpus.import_s:.1f}s ({corpus.summary}); tag page: "
              f"#{corpus.tag} ({corpus.tagged} entries)", flush=True)
        week = iso_week(dt.datetime.now(dt.UTC).date())
        servers = {}
        results = {}
        try:
            servers["bare"] = start_bare(corpus.database)
            servers["app"] = start_web(corpus.data_dir, DATABASE)
            pages = kept_pages(corpus, week)
            runner_token = cli_token(corpus.data_dir, "runner")
            alone = kept_views(servers["app"][1], pages)
            after = kept_views(servers["app"][1], pages,
                               journal_commit(servers["app"][1], runner_token))
            polls = {kind: (alone[kind], after[kind]) for kind in pages}
            # From here on the web has an idle runner polling it, as under `commonplace up`.
            servers["runner"] = (start_runner(corpus.data_dir, servers["app"][1],
                                              runner_token), 0)
            driven = {kind: (servers[server][1], make, servers[server][0].pid)
                      for kind, (server, make) in kinds(corpus, week).items()}
            for port, make, _ in driven.values():
                conn = one_connection(port)
                for _ in range(10):  # warm up: template compile, caches, connections
                    timed(conn, make(rng))
                drive(port, make, 0.5, args.concurrency)  # every worker thread warm
                conn.close()
            rates, latencies, cpu = concurrent(driven, args)
            for kind, (port, make, _) in driven.items():
                conn = one_connection(port)  # a fresh one: gunicorn drops idle keep-alives
                seq = [timed(conn, make(rng)) for _ in range(args.requests)]
                conn.close()
                lat = latencies[kind]
                results[kind] = {"rps": sum(rates[kind]) / len(rates[kind]),
                                 "rounds": rates[kind], "p50": pct(lat, 50),
                                 "p99": pct(lat, 99), "seq": pct(seq, 50),
                                 "seq95": pct(seq, 95), "n": len(lat),
                                 "cpu": 1000 * cpu[kind] / len(lat)}
            saved = saving.measure(servers["app"][1], corpus, rng)  # last: it adds notes
        finally:
            for proc, _ in servers.values():
                stop(proc)
        return corpus, results, polls, saved
    finally:
        shutil.rmtree(work, ignore_errors=True)


def concurrent(driven: dict, args) -> tuple[dict, dict, dict[str, float]]:
    """Every kind under --concurrency clients for --seconds in all, in --rounds slices: the
    kinds in order, then in reverse, and so on. This machine's speed drifts (other
    tenants) by tens of percent within a run; a kind and the baseline measured a minute
    apart once would carry that drift into their ratio. With an even number of rounds in
    alternating order every kind's slices lie, on average, at the same moment of the run,
    so a steady drift cancels from the ratios of their mean rates. Also the server's CPU
    seconds over each kind's slices (serving.server_cpu), for its CPU per request."""
    order = list(driven)
    rates: dict[str, list[float]] = {kind: [] for kind in order}
    latencies: dict[str, list[float]] = {kind: [] for kind in order}
    cpu = dict.fromkeys(order, 0.0)
    for r in range(args.rounds):
        for kind in (order if r % 2 == 0 else order[::-1]):
            port, make, pid = driven[kind]
            before = server_cpu(pid)
            rps, lat = drive(port, make, args.seconds / args.rounds, args.concurrency)
            cpu[kind] += server_cpu(pid) - before
            rates[kind].append(rps)
            latencies[kind] += lat
    return rates, latencies, cpu


def run_runs(args) -> None:
    """bench/runs.py's runs and kinds, with bare+row (bench/bare.py on the same database)
    as one more baseline kind."""
    print(f"\nruns: {args.runs} finished runs (bench/runs.py)", flush=True)
    shapes = runs.load_shapes(args.shapes)
    data_dir = Path(tempfile.mkdtemp(prefix="cp-bench-runs-"))
    try:
        app = runs.fill(data_dir, args.runs, shapes, args.seed)
        app.extensions["db"].engine.dispose()
        servers = {}
        try:
            servers["bare"] = start_bare(data_dir / "c.db")
            servers["app"] = start_web(data_dir)
            every = {"bare+row": (servers["bare"][1], lambda rng: "/row", 0)}
            every.update({kind: (servers["app"][1], make, goal)
                          for kind, (make, goal) in runs.kinds(args.runs).items()})
            table, load = runs.measure(every, args.requests, args.seconds,
                                       args.concurrency, args.seed)
        finally:
            for proc, _ in servers.values():
                stop(proc)
        runs.report(table, ["healthz", "bare+row"], args.requests, args.seconds,
                    args.concurrency, load)
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
    parser.add_argument("--rounds", type=int, default=2,
                        help="slices each kind's --seconds is driven in (even: see concurrent)")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--requests", type=int, default=300, help="per kind, sequential")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--runs", type=int, default=10_000, help="finished runs; 0: none")
    parser.add_argument("--shapes", type=Path, default=Path("/tmp/runs"),
                        help="lab results the runs copy (bench/runs.py makes missing ones)")
    parser.add_argument("--accept-encoding", default="",
                        help="sent with every GET, as a browser does: the pages compressed")
    args = parser.parse_args()
    if args.accept_encoding:
        serving.EVERY_GET["Accept-Encoding"] = args.accept_encoding
    if args.views_only:
        run_views(args.requests)
        return
    measured = {n: run_size(n, args) for n in args.sizes}
    corpora = {n: corpus for n, (corpus, *_) in measured.items()}
    report_import(corpora)
    report({n: r for n, (_, r, *_) in measured.items()}, corpora, args.concurrency)
    report_polls({n: p for n, (_, _, p, _) in measured.items()})
    saving.report({n: s for n, (*_, s) in measured.items()})
    if args.runs:
        run_runs(args)
    if not args.no_views:
        run_views(args.requests)


if __name__ == "__main__":
    main()
