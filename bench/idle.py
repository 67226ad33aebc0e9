"""What the journal's processes cost while nothing happens, against a small host's targets.

    .venv/bin/python bench/idle.py [--seconds 30] [--entries 100000 [--keep DIR]]

Starts `commonplace up` (the supervisor, and under it the web, the scheduler and a local
runner) on a free loopback port in a fresh data directory, waits until the web answers,
lets the others start, then samples each process's CPU time (utime+stime from /proc) over
the window and its memory, RSS and PSS (/proc/PID/smaps_rollup), with the stack's totals
and the targets (TARGETS) beside them; at the end it stops what it started, by PID. The
baselines in the same run: an idle `python -c "import time; time.sleep(…)"` — the floor
any Python process pays — and two idle processes that have imported only what a process
cannot do without: Flask, SQLAlchemy's ORM and gunicorn's worker (STACK_FLOOR) for a web
worker, APScheduler and sqlite3 (SCHEDULER_FLOOR) for the scheduler's clock. (A job's
child, with the ORM, lives only while it works: the window measures the clock at rest.)

With --entries N the data directory first holds a notebook of N entries (bench/corpus.py:
bench/importing.py's markdown corpus loaded by the product's own `commonplace import`), and
before the idle window every page kind is read a few times on each worker
(home, entries, the letter, the site map, a tag, search, the API), one request at a time
and then by --clients readers at once (16 unless told), so the workers' memory is what a
worker that has served that notebook under load holds (goal: <= 60 MB at 100k entries):
each thread that served at the same time as others holds a database connection and its
page cache.
Memory is RSS (every page the process maps, shared ones included: the goal's measure) and
PSS (shared pages divided among the processes that share them), at the end of the window,
by then a rest (app/web/resting.py: a worker closes its idle connections and trims its heap
REST_AFTER seconds after its last request); each worker's RSS right after the load is
printed beside it. Beside the workers, with --entries, the workers of a bare Flask app
under the same gunicorn.conf.py (bench/bare.py: a constant page and a row of the same
database through a template), read by as many clients as the web's: what any worker of
this server holds after serving. Then, with --entries, what a rest costs the request that
ends it: an entry page asked first after a rest against the same page warm. --keep DIR
imports the notebook into DIR and reuses it from there next time (a 100k import takes
minutes).
"""

from __future__ import annotations

import argparse
import http.client
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.web import resting  # noqa: E402
from bench import corpus as corpus_of  # noqa: E402
from bench.serving import cpu_seconds, drive, free_port, start_bare, stop  # noqa: E402

# The second baseline: a process that only imports what a web worker cannot do without -
# the web framework, the ORM and the server the product card fixes - and waits. No worker
# can hold less than this; the goal (60 MB) is read against it.
STACK_FLOOR = ("import flask, sqlalchemy.orm, gunicorn.workers.gthread, time; "
               "time.sleep(3600)")
# The same for the scheduler: the clock it is written on and the standard library's sqlite3,
# which it reads the tables with (app/journal/clock.py; its jobs' work, with the ORM, is
# done in children that exit).
SCHEDULER_FLOOR = "import apscheduler.schedulers.blocking, sqlite3, time; time.sleep(3600)"


def children(pid: int) -> list[int]:
    out = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(proc.name))
            except (OSError, ValueError):
                pass
    return out


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def pss_mb(pid: int) -> float:
    """Proportional memory: each shared page (the interpreter, libraries, what a worker
    still shares with the master it was forked from) divided among the processes that
    map it, so the processes' PSS add up to what they take from the machine."""
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) / 1024
    return 0.0


def cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


def read_pages(port: int, corpus, rounds: int = 40, seed: int = 1) -> None:
    """Every page kind, `rounds` times (keep-alive connections, so both workers serve)."""
    rng = random.Random(seed)
    token = {"Authorization": f"Bearer {corpus.token}"}
    for _ in range(rounds):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        for path in ("/", "/entries/{}/{}".format(*rng.choice(corpus.entries)),
                     f"/weeks/{corpus.week}", "/sitemap", "/sitemap?year=2017",
                     f"/tags/{corpus.tag}", "/search?q=" + rng.choice(corpus.queries),
                     f"/api/v1/entries/{rng.choice(corpus.entries)[0]}"):
            conn.request("GET", path.replace(" ", "+").replace('"', "%22"), headers=token)
            conn.getresponse().read()
        conn.close()


def read_at_once(port: int, corpus, clients: int, rounds: int = 20) -> None:
    """`clients` readers at the same time, each read_pages for `rounds` rounds: a worker's
    threads then each hold a database connection, as under real load."""
    readers = [threading.Thread(target=read_pages, args=(port, corpus, rounds, seed))
               for seed in range(2, clients + 2)]
    for reader in readers:
        reader.start()
    for reader in readers:
        reader.join()


def first_after_rest(port: int, corpus, samples: int = 3) -> None:
    """What a rest costs the request that ends it: an entry page, the first after a worker
    rested (its connection to open again, a cold page cache), against the same page
    asked again right after on the same connection, warm."""
    firsts, warm = [], []
    path = "/entries/{}/{}".format(*corpus.entries[0])
    for _ in range(samples):
        time.sleep(resting.REST_AFTER + 1)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        for i in range(21):
            started = time.perf_counter()
            conn.request("GET", path)
            conn.getresponse().read()
            (warm if i else firsts).append((time.perf_counter() - started) * 1000)
        conn.close()
    print(f"an entry page, the first request after a rest: {statistics.median(firsts):.2f} ms "
          f"(median of {samples}); warm: {statistics.median(warm):.2f} ms")


# What the issue asks of each process on a small host, in MB: (measure, target).
TARGETS = {"supervisor": ("RSS", 20), "scheduler": ("RSS", 45), "web worker": ("RSS", 60)}
STACK_TARGET_PSS = 180


def role(line: str) -> str:
    """Which of `up`'s children a command line is."""
    return ("scheduler" if "app.scheduler" in line
            else "runner" if " runner" in line
            else "web (gunicorn master)" if "gunicorn" in line else line[:40])


def stack(top: int, command: str) -> dict[str, int]:
    """`up` (the supervisor) or `web` (exec'd into gunicorn's master), and every process
    under it, by role."""
    procs, masters = {}, [top]
    if command == "up":
        procs["supervisor"] = top
        masters = []
        for pid in children(top):
            procs[role(cmdline(pid))] = pid
            masters += [pid] if "gunicorn" in cmdline(pid) else []
    for master in masters:
        procs["web (gunicorn master)"] = master
        for i, worker in enumerate(children(master)):
            procs[f"web worker {i + 1}"] = worker
    return procs


def wait_up(port: int, proc: subprocess.Popen, settle: float) -> None:
    """Until the web answers /healthz, then `settle` seconds more (the scheduler's and the
    runner's start-up)."""
    deadline = time.monotonic() + 600  # `up` first brings a big notebook up to date
    while True:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/healthz")
            if conn.getresponse().status == 200:
                break
        except OSError:
            pass
        if time.monotonic() > deadline or proc.poll() is not None:
            raise SystemExit("the web did not start")
        time.sleep(0.5)
    time.sleep(settle)


def report(procs: dict[str, int], before: dict[str, float], served: dict[str, float],
           seconds: float, loaded: bool) -> None:
    print(f"idle for {seconds:.0f}s after start-up (CPU % of one core; resident memory, RSS "
          f"and PSS; a worker rests {resting.REST_AFTER:.0f}s after its last request)")
    total_rss = total_pss = 0.0
    for name, pid in procs.items():
        used = cpu_seconds(pid) - before[name]
        rss, pss = rss_mb(pid), pss_mb(pid)
        kind = next((k for k in TARGETS if name.startswith(k)), None)
        target = (f"  target <= {TARGETS[kind][1]} MB {TARGETS[kind][0]}"
                  if kind and (loaded or kind != "web worker") else "")
        print(f"  {name:<24} {100 * used / seconds:6.2f}% CPU  {rss:7.1f} MB"
              f"  {pss:7.1f} MB PSS{target}" + (
                  f"  (right after the load: {served[name]:.1f} MB)"
                  if loaded and name.startswith("web worker") else ""))
        if not name.startswith(("baseline", "floor")):
            total_rss, total_pss = total_rss + rss, total_pss + pss
    print(f"  {'the stack, in all':<24} {'':11}{total_rss:7.1f} MB  {total_pss:7.1f} MB PSS"
          + ("" if loaded else f"  target <= {STACK_TARGET_PSS} MB PSS (at rest, an empty "
                                "notebook)"))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--entries", type=int, default=0,
                        help="import a notebook of this many entries first "
                             "(bench/corpus.py)")
    parser.add_argument("--clients", type=int, default=16,
                        help="with --entries: then this many readers at once (0: none)")
    parser.add_argument("--keep", type=Path, default=None,
                        help="with --entries: the notebook's folder, reused if there")
    args = parser.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="cp-idle-"))
    data = work / "data"
    corpus = bare = None
    if args.entries:
        corpus = corpus_of.reuse_or_build(work, args.entries, seed=14)
        print(f"imported {args.entries} entries: {corpus.summary}", flush=True)
    port = free_port()
    env = {**os.environ, "COMMONPLACE_DATA_DIR": str(data), "COMMONPLACE_AUTH": "dev",
           "COMMONPLACE_BIND": f"127.0.0.1:{port}", "COMMONPLACE_TIMEZONE": "UTC"}
    env.pop("COMMONPLACE_DATABASE_URL", None)
    # With a seeded notebook, the web process alone (`commonplace web`, gunicorn as
    # configured): its workers are what is measured, and `up` would first re-render every
    # seeded note (minutes at 100k).
    command = "web" if corpus else "up"
    up = subprocess.Popen([sys.executable, "-m", "app.cli", command], cwd=ROOT, env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    baseline = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    floor = subprocess.Popen([sys.executable, "-c", STACK_FLOOR])
    scheduler_floor = subprocess.Popen([sys.executable, "-c", SCHEDULER_FLOOR])
    started: set[int] = set()
    try:
        wait_up(port, up, settle=2 if corpus else 8)
        if corpus:
            bare = start_bare(corpus.database)
            read_pages(port, corpus)
            if args.clients:
                read_at_once(port, corpus, args.clients)
            for path in ("/", "/row"):
                drive(bare[1], lambda _rng, path=path: path, 2, max(args.clients, 1))
        procs = {"baseline (idle python)": baseline.pid, "floor (the web's)": floor.pid,
                 "floor (the scheduler's)": scheduler_floor.pid,
                 **({f"baseline: bare worker {i + 1}": pid
                     for i, pid in enumerate(children(bare[0].pid))} if bare else {}),
                 **stack(up.pid, command)}
        started = set(procs.values())
        before = {name: cpu_seconds(pid) for name, pid in procs.items()}
        served = {name: rss_mb(pid) for name, pid in procs.items()}  # right after the load
        time.sleep(args.seconds)
        report(procs, before, served, args.seconds, loaded=corpus is not None)
        if corpus and args.seconds > resting.REST_AFTER:
            first_after_rest(port, corpus)
    finally:
        for proc in (baseline, floor, scheduler_floor):
            proc.kill()
            proc.wait()
        if bare:
            stop(bare[0])
        up.send_signal(signal.SIGTERM)
        try:
            up.wait(timeout=30)
        except subprocess.TimeoutExpired:
            up.kill()
            up.wait()
        for pid in started - {up.pid}:  # none should be left; any that is, by its PID
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
