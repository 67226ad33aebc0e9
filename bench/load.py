"""The web under a realistic load and under the floods of the hardening issue (finding 1),
against /healthz measured in the same run.

    .venv/bin/python bench/load.py                        # 60 s of load, 20 s per flood
    .venv/bin/python bench/load.py --seconds 15 --flood-seconds 10

A fresh data directory gets notes through `commonplace import` (bench/corpus.py), tokens
are made, and the real server (`commonplace web`: gunicorn.conf.py, serve mode with an
owner) is started on a free loopback port. Everything talks to it over TCP with bearer
tokens, as the CLI and the runners do. Then:

  quiet    /healthz alone, one request at a time: the baseline of every ratio below
  load     for --seconds: 8 runners long-polling (`wait` 10, as the agent does), 32 readers
           (home, entry pages, the search page, the search API, the site map, each
           reader pausing 0-2x --think between requests) and 4 writers creating notes; a
           probe asks /healthz every 100 ms
  floods   for --flood-seconds each, with the probe running:
           slow-body  12 connections POST with Content-Length: 1000000 and no identity,
                      sending one byte a second (reconnecting whenever the server closes)
           long-poll  12 parallel POST /api/v1/runner/lease {"wait": 30} with one runner
                      token, each sent again as soon as it is answered

It prints p50/p99 per kind and against /healthz, the 5xx count (goal 0), acknowledged saves
missing from the database afterwards (goal 0), and /healthz p99 during each flood (goal
< 1 s). Timings on a shared machine are noisy: compare ratios within one run.
Everything it starts (the server's process group, its threads, the temporary directory)
is gone when it exits, also on Ctrl-C or an error.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import logging
import os
import random
import select
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from urllib.parse import quote_plus as quote

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import sqlalchemy as sa  # noqa: E402

from app import create_app  # noqa: E402
from app.models import Entry, Token  # noqa: E402
from app.web.auth.identity import hash_token, new_token  # noqa: E402
from bench.corpus import DATABASE, build  # noqa: E402
from bench.serving import free_port, stop_server  # noqa: E402

OWNER = "owner@example.com"
TIMEOUT = 40.0  # longer than any long poll: a probe that times out is recorded as this


class Stats:
    """Latencies by kind, and every status seen, from many threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.times: dict[str, list[float]] = defaultdict(list)
        self.statuses: Counter = Counter()

    def add(self, kind: str, seconds: float, status: int) -> None:
        with self.lock:
            self.times[kind].append(seconds)
            self.statuses[(kind, status)] += 1

    def server_errors(self) -> int:
        with self.lock:
            return sum(n for (_, status), n in self.statuses.items() if status >= 500)


class Client:
    """One keep-alive connection; reconnects after an error. Status 0 means no answer."""

    def __init__(self, port: int, headers: dict[str, str]) -> None:
        self.port, self.headers = port, headers
        self.conn: http.client.HTTPConnection | None = None

    def request(self, method: str, path: str, body: dict | None = None) -> tuple[int, bytes,
                                                                                 dict]:
        data = json.dumps(body).encode() if body is not None else None
        headers = {**self.headers, **({"Content-Type": "application/json"} if data else {})}
        for attempt in (1, 2):  # a kept-alive connection the server closed: once more
            if self.conn is None:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=TIMEOUT)
            try:
                self.conn.request(method, path, body=data, headers=headers)
                response = self.conn.getresponse()
                payload = response.read()
                return response.status, payload, dict(response.getheaders())
            except (OSError, http.client.HTTPException):
                self.close()
                if attempt == 2:
                    return 0, b"", {}
        return 0, b"", {}

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


# -- the server ------------------------------------------------------------------------------


def prepare(work: Path, entries: int, runners: int) -> tuple[Path, list, list[str], str,
                                                             list[str]]:
    """Notes imported the product's way (bench/corpus.py), and an owner token and runner
    tokens (stored hashed, as the CLI does): (data folder, (id, slug) of a sample of the
    notes, search queries over their words, the owner's token, the runners')."""
    logging.getLogger("app").setLevel(logging.ERROR)  # the seeding app's dev-mode warning
    corpus = build(work, entries, 7)
    data_dir = corpus.data_dir
    app = create_app({"DATA_DIR": data_dir, "DATABASE_URL": f"sqlite:///{corpus.database}",
                      "AUTH_MODE": "dev", "TIMEZONE": "UTC"})
    secrets = {name: new_token() for name in ["owner", "flood", *map("runner-{}".format,
                                                                     range(runners))]}
    with app.extensions["db"].write() as session:
        for name, secret in secrets.items():
            role = "owner" if name == "owner" else "runner"
            session.add(Token(name=name, role=role, token_hash=hash_token(secret)))
    app.extensions["db"].engine.dispose()
    return (data_dir, corpus.entries, corpus.queries, secrets.pop("owner"),
            [secrets.pop("flood"), *secrets.values()])


def start_server(data_dir: Path, port: int) -> subprocess.Popen:
    env = {**os.environ, "COMMONPLACE_DATA_DIR": str(data_dir),
           "COMMONPLACE_DATABASE_URL": f"sqlite:///{data_dir / DATABASE}",
           "COMMONPLACE_BIND": f"127.0.0.1:{port}", "COMMONPLACE_AUTH": "serve",
           "COMMONPLACE_OWNERS": OWNER, "COMMONPLACE_TIMEZONE": "UTC",
           "COMMONPLACE_LOG_LEVEL": "warning"}
    # A session of its own: at the end the whole group (gunicorn and its workers) is stopped.
    with open(data_dir / "web.log", "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "app.cli", "web"], cwd=ROOT, env=env,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 60
    while True:
        try:
            with contextlib.closing(http.client.HTTPConnection("127.0.0.1", port, timeout=2)) \
                    as conn:
                conn.request("GET", "/healthz")
                if conn.getresponse().status == 200:
                    return proc
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_server(proc)
            raise RuntimeError(f"the server did not start; see {data_dir / 'web.log'}")
        time.sleep(0.2)


# -- who sends what --------------------------------------------------------------------------


def probe(port: int, stats: Stats, kind: str, stop: threading.Event, every: float = 0.1) -> None:
    """/healthz on a new connection each time, as a health check does: a kept-alive one
    would stay with one gunicorn worker and miss what happens to the other."""
    client = Client(port, {})
    while not stop.is_set():
        start = time.perf_counter()
        status, _, _ = client.request("GET", "/healthz")
        stats.add(kind, time.perf_counter() - start, status)
        client.close()
        stop.wait(every)


def reader(port: int, token: str, ids: list, queries: list[str], stats: Stats, think: float,
           rng: random.Random, stop: threading.Event) -> None:
    client = Client(port, {"Authorization": f"Bearer {token}"})
    pages = {
        "home": lambda: "/",
        "entry": lambda: "/entries/{}/{}".format(*rng.choice(ids)),
        "search": lambda: "/search?q=" + quote(rng.choice(queries)),
        "api-search": lambda: "/api/v1/search?q=" + quote(rng.choice(queries)),
        "sitemap": lambda: "/sitemap",
    }
    kinds = list(pages)
    while not stop.is_set():
        kind = rng.choice(kinds)
        start = time.perf_counter()
        status, _, _ = client.request("GET", pages[kind]())
        stats.add(kind, time.perf_counter() - start, status)
        stop.wait(rng.uniform(0, 2 * think))
    client.close()


def writer(port: int, token: str, number: int, stats: Stats, acknowledged: list,
           think: float, rng: random.Random, stop: threading.Event) -> None:
    client = Client(port, {"Authorization": f"Bearer {token}"})
    i = 0
    while not stop.is_set():
        i += 1
        body = {"title": f"Load {number}-{i}", "body": f"written under load #load w{number}"}
        start = time.perf_counter()
        status, payload, _ = client.request("POST", "/api/v1/entries", body)
        stats.add("write", time.perf_counter() - start, status)
        if status == 201:
            acknowledged.append(json.loads(payload)["id"])
        stop.wait(rng.uniform(0, 2 * think))
    client.close()


def runner(port: int, token: str, wait: float, stats: Stats, kind: str, honest: bool,
           stop: threading.Event) -> None:
    """An agent's loop: register, then long-poll. An honest one waits as told on 429."""
    client = Client(port, {"Authorization": f"Bearer {token}"})
    client.request("POST", "/api/v1/runner/register", {"labels": {}, "version": "bench"})
    while not stop.is_set():
        start = time.perf_counter()
        status, _, headers = client.request("POST", "/api/v1/runner/lease", {"wait": wait})
        stats.add(kind, time.perf_counter() - start, status)
        if status == 0:
            stop.wait(1)
        elif honest and status in (429, 503):
            stop.wait(min(float(headers.get("Retry-After") or 5), 10))
    client.close()


def slow_body(port: int, stats: Stats, stop: threading.Event) -> None:
    """A POST that promises a megabyte and sends a byte a second, without identity; when
    the server hangs up, another one."""
    head = (b"POST /api/v1/entries HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nContent-Length: 1000000\r\n\r\n")
    while not stop.is_set():
        start = time.perf_counter()
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
                sock.sendall(head)
                while not stop.wait(1):
                    sock.sendall(b" ")
                    readable, _, _ = select.select([sock], [], [], 0)
                    if readable and sock.recv(65536) == b"":
                        break  # the server hung up: start again
        except OSError:
            pass
        stats.add("slow-body connection", time.perf_counter() - start, 0)
        stop.wait(0.05)


def in_threads(targets: list, seconds: float) -> None:
    """Run every (function, args) in its own thread for `seconds`, then stop and join; each
    function takes the stop event as its last argument."""
    stop = threading.Event()
    threads = [threading.Thread(target=f, args=(*args, stop), daemon=True) for f, args in targets]
    for thread in threads:
        thread.start()
    try:
        stop.wait(seconds)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=TIMEOUT + 5)


# -- the report ------------------------------------------------------------------------------


def pct(values: list[float], q: int) -> float:
    if len(values) < 2:
        return values[0] if values else float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def report(stats: Stats, base: list[float], kinds: list[str]) -> None:
    b50, b99 = pct(base, 50) * 1000, pct(base, 99) * 1000
    print(f"  {'kind':<22} {'n':>6} {'p50 ms':>9} {'p99 ms':>9} {'p50/base':>9} "
          f"{'p99/base':>9}   statuses")
    print(f"  {'healthz (quiet)':<22} {len(base):>6} {b50:9.1f} {b99:9.1f} {1:9.1f}x "
          f"{1:9.1f}x")
    for kind in kinds:
        times = stats.times.get(kind, [])
        if not times:
            continue
        p50, p99 = pct(times, 50) * 1000, pct(times, 99) * 1000
        seen = ", ".join(f"{s}: {n}" for (k, s), n in sorted(stats.statuses.items()) if k == kind)
        print(f"  {kind:<22} {len(times):>6} {p50:9.1f} {p99:9.1f} {p50 / b50:9.1f}x "
              f"{p99 / b99:9.1f}x   {seen}")


def missing_saves(data_dir: Path, acknowledged: list[int]) -> int:
    engine = sa.create_engine(f"sqlite:///{data_dir / DATABASE}")
    try:
        with engine.connect() as conn:
            present = set(conn.scalars(sa.select(Entry.id).where(Entry.id.in_(acknowledged))))
    finally:
        engine.dispose()
    return len(set(acknowledged) - present)


def interrupted(_signum, _frame) -> None:
    """SIGTERM (a CI timeout, kill) cleans up as Ctrl-C does."""
    raise KeyboardInterrupt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60, help="length of the load phase")
    parser.add_argument("--flood-seconds", type=float, default=20, help="length of each flood")
    parser.add_argument("--entries", type=int, default=2000, help="notes seeded first")
    parser.add_argument("--readers", type=int, default=32)
    parser.add_argument("--writers", type=int, default=4)
    parser.add_argument("--runners", type=int, default=8)
    parser.add_argument("--think", type=float, default=0.5,
                        help="mean pause of a reader or writer between requests, seconds")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="cp-load-"))
    proc = None
    signal.signal(signal.SIGTERM, interrupted)
    try:
        data_dir, ids, queries, owner, runner_tokens = prepare(work, args.entries, args.runners)
        flood_token, runner_tokens = runner_tokens[0], runner_tokens[1:]
        port = free_port()
        proc = start_server(data_dir, port)
        rng = random.Random(11)
        print(f"server up on 127.0.0.1:{port} with {args.entries} notes; "
              f"{args.seconds:.0f} s of load, {args.flood_seconds:.0f} s per flood", flush=True)

        quiet = Stats()
        in_threads([(probe, (port, quiet, "healthz", ))], 5)
        base = quiet.times["healthz"]

        load = Stats()
        acknowledged: list[int] = []
        targets = [(probe, (port, load, "healthz (load)"))]
        targets += [(runner, (port, token, 10, load, "lease", True)) for token in runner_tokens]
        targets += [(reader, (port, owner, ids, queries, load, args.think,
                              random.Random(rng.random()))) for _ in range(args.readers)]
        targets += [(writer, (port, owner, n, load, acknowledged, args.think,
                              random.Random(rng.random()))) for n in range(args.writers)]
        in_threads(targets, args.seconds)
        missing = missing_saves(data_dir, acknowledged)  # committed saves, read beside the server

        slow = Stats()
        in_threads([(probe, (port, slow, "healthz (slow bodies)"))]
                   + [(slow_body, (port, slow))] * 12, args.flood_seconds)
        polls = Stats()
        in_threads([(probe, (port, polls, "healthz (long polls)"))]
                   + [(runner, (port, flood_token, 30, polls, "lease flood", False))] * 12,
                   args.flood_seconds)
    except KeyboardInterrupt:
        print("interrupted: cleaning up", file=sys.stderr)
        raise SystemExit(130) from None
    finally:
        if proc is not None:
            stop_server(proc)
        shutil.rmtree(work, ignore_errors=True)

    print(f"\nload: {args.runners} runners long-polling, {args.readers} readers, "
          f"{args.writers} writers for {args.seconds:.0f} s")
    report(load, base, ["healthz (load)", "home", "entry", "search", "api-search", "sitemap",
                        "write", "lease"])
    print("\nfloods (finding 1), /healthz probed every 100 ms:")
    report(slow, base, ["healthz (slow bodies)"])
    report(polls, base, ["healthz (long polls)", "lease flood"])
    errors = load.server_errors() + slow.server_errors() + polls.server_errors()
    print(f"\n5xx answers: {errors}   (goal 0)")
    print(f"acknowledged saves: {len(acknowledged)}, missing afterwards: {missing}   (goal 0)")
    for name, stats in (("slow-body", slow), ("long-poll", polls)):
        times = next(t for k, t in stats.times.items() if k.startswith("healthz"))
        print(f"/healthz p99 during the {name} flood: {pct(times, 99) * 1000:.0f} ms, "
              f"{pct(times, 99) / pct(base, 99):.1f}x the quiet p99   (goal < 1 s)")


if __name__ == "__main__":
    main()
