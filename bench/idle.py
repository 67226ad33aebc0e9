"""What the journal's background processes cost while nothing happens.

    .venv/bin/python bench/idle.py [--seconds 60] [--entries 100000]

Starts `commonplace up` (web + scheduler + local runner) on a free loopback port in a
fresh data directory, lets it settle, then samples each process's CPU time (utime+stime
from /proc) over the window and its resident memory. The baselines in the same run: an
idle `python -c "import time; time.sleep(…)"` — the floor any Python process pays — and
an idle process that has imported only Flask, SQLAlchemy's ORM and gunicorn's worker
(STACK_FLOOR): the floor any web worker of this stack pays, before the app's own code.

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
printed beside it. Then, with --entries, what a rest costs the request that ends it: an
entry page asked first after a rest against the same page warm.
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
from bench.serving import cpu_seconds, free_port  # noqa: E402

# The second baseline: a process that only imports what a web worker cannot do without -
# the web framework, the ORM and the server the product card fixes - and waits. No worker
# can hold less than this; the goal (60 MB) is read against it.
STACK_FLOOR = ("import flask, sqlalchemy.orm, gunicorn.workers.gthread, time; "
               "time.sleep(3600)")


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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--entries", type=int, default=0,
                        help="import a notebook of this many entries first "
                             "(bench/corpus.py)")
    parser.add_argument("--clients", type=int, default=16,
                        help="with --entries: then this many readers at once (0: none)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="cp-idle-"))
    data = work / "data"
    corpus = None
    if args.entries:
        corpus = corpus_of.build(work, args.entries, seed=14)
        print(f"imported {args.entries} entries: {corpus.summary}", flush=True)
    port = free_port()
    env = {**os.environ, "COMMONPLACE_DATA_DIR": str(data), "COMMONPLACE_AUTH": "dev",
           "COMMONPLACE_BIND": f"127.0.0.1:{port}", "COMMONPLACE_TIMEZONE": "UTC"}
    ids = corpus.entries if corpus else []
    # With a seeded notebook, the web process alone (`commonplace web`, gunicorn as
    # configured): its workers are what is measured, and `up` would first re-render every
    # seeded note (minutes at 100k).
    command = "web" if ids else "up"
    up = subprocess.Popen([sys.executable, "-m", "app.cli", command], cwd=ROOT, env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    baseline = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    floor = subprocess.Popen([sys.executable, "-c", STACK_FLOOR])
    try:
        time.sleep(3 if ids else 15)  # migrations, imports, registration
        deadline = time.monotonic() + 600  # `up` first brings a big notebook up to date
        while ids:
            try:
                http.client.HTTPConnection("127.0.0.1", port, timeout=1).connect()
                break
            except OSError:
                if time.monotonic() > deadline or up.poll() is not None:
                    raise SystemExit("the web did not start") from None
                time.sleep(1)
        if corpus:
            read_pages(port, corpus)
            if args.clients:
                read_at_once(port, corpus, args.clients)
        procs = {"baseline (idle python)": baseline.pid, "floor (the stack)": floor.pid}
        if command == "web":  # exec'd into the gunicorn master
            procs["web (gunicorn master)"] = up.pid
            for i, worker in enumerate(children(up.pid)):
                procs[f"web worker {i + 1}"] = worker
        for pid in children(up.pid) if command == "up" else []:
            line = cmdline(pid)
            name = ("scheduler" if " scheduler" in line else "runner" if " runner" in line
                    else "web (gunicorn master)" if "gunicorn" in line else line[:40])
            procs[name] = pid
            if "gunicorn" in line:
                for i, worker in enumerate(children(pid)):
                    procs[f"web worker {i + 1}"] = worker
        before = {name: cpu_seconds(pid) for name, pid in procs.items()}
        served = {name: rss_mb(pid) for name, pid in procs.items()}  # right after the load
        time.sleep(args.seconds)
        print(f"idle for {args.seconds:.0f}s after start-up "
              f"(CPU % of one core; resident memory, RSS and PSS; a worker rests "
              f"{resting.REST_AFTER:.0f}s after its last request)")
        for name, pid in procs.items():
            used = cpu_seconds(pid) - before[name]
            print(f"  {name:<24} {100 * used / args.seconds:6.2f}% CPU  {rss_mb(pid):7.1f} MB"
                  f"  {pss_mb(pid):7.1f} MB PSS" + (
                      f"  (right after the load: {served[name]:.1f} MB)"
                      if corpus and name.startswith("web worker") else ""))
        if corpus and args.seconds > resting.REST_AFTER:
            first_after_rest(port, corpus)
    finally:
        baseline.kill()
        floor.kill()
        up.send_signal(signal.SIGTERM)
        try:
            up.wait(timeout=30)
        except subprocess.TimeoutExpired:
            up.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
