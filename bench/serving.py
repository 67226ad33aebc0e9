"""What every bench that times the real server shares: a free loopback port, `commonplace
web` (gunicorn as configured) on a data directory and the bare baselines (bench/bare.py
under the same gunicorn.conf.py), waiting for them to listen, stopping them by PID, one
timed GET, keep-alive clients driving a path concurrently, kept pages viewed again (each
after a journal-only commit, or not), percentiles, and seeding notes straight into the
tables (for the benches that measure a query, not the import)."""

from __future__ import annotations

import contextlib
import http.client
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import sqlalchemy as sa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.models import link_key  # noqa: E402
from app.notebook.search_index import INSERT_FTS, rebuild_recent  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_web(data_dir: Path, database: str = "c.db") -> tuple[subprocess.Popen, int]:
    """The real web server on <data_dir>/<database>, dev identity (loopback is the owner).
    (`commonplace import` writes <data_dir>/commonplace.db, the product's default name.)"""
    port = free_port()
    env = {**os.environ, "COMMONPLACE_DATA_DIR": str(data_dir),
           "COMMONPLACE_DATABASE_URL": f"sqlite:///{data_dir}/{database}",
           "COMMONPLACE_BIND": f"127.0.0.1:{port}", "COMMONPLACE_AUTH": "dev",
           "COMMONPLACE_TIMEZONE": "UTC"}
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", "web"], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_listening(proc, port)
    return proc, port


def start_bare(database: Path) -> tuple[subprocess.Popen, int]:
    """bench/bare.py (GET / and GET /row, a row of <database>'s entry table) under the
    repository's gunicorn.conf.py: the same workers and threads as the real server."""
    port = free_port()
    env = {**os.environ, "BENCH_DB": str(database)}
    proc = subprocess.Popen([sys.executable, "-m", "gunicorn", "-c", "gunicorn.conf.py",
                             "--bind", f"127.0.0.1:{port}", "bench.bare:app"], cwd=ROOT,
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_listening(proc, port)
    return proc, port


def start_runner(data_dir: Path, port: int, token: str) -> subprocess.Popen:
    """An idle runner agent polling the server on `port` for work, as the one `commonplace
    up` starts beside the web (its long polls stamp it as seen: a commit every 10 s)."""
    env = {**os.environ, "COMMONPLACE_DATA_DIR": str(data_dir),
           "COMMONPLACE_RUNNER_TOKEN": token}
    return subprocess.Popen([sys.executable, "-m", "app.cli", "runner", "--server",
                             f"http://127.0.0.1:{port}", "--work-dir", str(data_dir / "runner"),
                             "--poll-wait", "2"],  # it stops within 2 s
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def wait_listening(proc: subprocess.Popen, port: int) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            http.client.HTTPConnection("127.0.0.1", port, timeout=1).connect()
            return
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


def stop_server(proc: subprocess.Popen) -> None:
    """End the server's process group (only ours: it was started in a session of its own)."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # workers left behind by a master that died


def cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) a process has used, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def server_cpu(pid: int) -> float:
    """cpu_seconds of a server and every process under it (gunicorn's master and
    workers). A kind's server CPU per request is its cost without the load generator's
    share, which runs on the same cores and dilutes the req/s ratios."""
    total, todo = 0.0, [pid]
    while todo:
        pid = todo.pop()
        try:
            total += cpu_seconds(pid)
            for task in Path(f"/proc/{pid}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, ValueError):  # gone meanwhile
            pass
    return total


# Sent with every GET timed below (bench/web.py --accept-encoding): a browser's
# Accept-Encoding has the app compress what it sends.
EVERY_GET: dict[str, str] = {}


def timed(conn: http.client.HTTPConnection, path: str | tuple[str, dict]) -> float:
    """One GET in ms, refused unless 200; `path` may carry its headers: (path, headers)."""
    path, headers = path if isinstance(path, tuple) else (path, {})
    headers = {**EVERY_GET, **headers}
    start = time.perf_counter()
    conn.request("GET", path, headers=headers)
    response = conn.getresponse()
    body = response.read()
    elapsed = time.perf_counter() - start
    if response.status != 200:
        raise RuntimeError(f"{path} answered {response.status}: {body[:200]!r}")
    return elapsed * 1000


def one_connection(port: int) -> http.client.HTTPConnection:
    return http.client.HTTPConnection("127.0.0.1", port, timeout=60)


def drive(port: int, make_path, seconds: float, threads: int) -> tuple[float, list[float]]:
    """`threads` clients, each on its own keep-alive connection (a browser tab per user),
    asking for make_path(rng) for `seconds`: (requests per second, latencies in ms)."""
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


KEPT_VIEWS = 8


def kept_views(port: int, pages: dict[str, str], commit=None) -> dict[str, float]:
    """Each kept page viewed KEPT_VIEWS times (after one view that keeps it), each view
    right after commit() where one is given: sequential p50 in ms."""
    conn = one_connection(port)
    found = {}
    for kind, path in pages.items():
        timed(conn, path)
        views = []
        for _ in range(KEPT_VIEWS):
            if commit:
                commit()
            views.append(timed(conn, path))
        found[kind] = pct(views, 50)
    conn.close()
    return found


def journal_commit(port: int, token: str):
    """A commit to the journal alone: a runner registering (again), as an agent does when
    it starts; it stamps the runner's labels and last_seen_at."""
    def commit() -> None:
        conn = one_connection(port)
        conn.request("POST", "/api/v1/runner/register", body=b'{"labels": {}}',
                     headers={"Authorization": f"Bearer {token}",
                              "Content-Type": "application/json"})
        response = conn.getresponse()
        response.read()
        conn.close()
        if response.status != 200:
            raise RuntimeError(f"register answered {response.status}")
    return commit


def insert_notes(conn, entries: list[dict], fts: list[dict], tags: list[dict]) -> None:
    """Seed rows straight into the notebook's tables (entries, their search rows, tags)."""
    conn.execute(sa.text(
        "INSERT INTO entry (id, kind, date, iso_week, title, title_key, slug, body_md, "
        "body_html, toc_html, tags, status, revision, created_at, updated_at) VALUES (:id, "
        ":kind, :date, :iso_week, :title, :title_key, :slug, :body_md, :body_html, :toc_html, "
        ":tags, :status, :revision, :created_at, :updated_at)"),
        [{**e, "title_key": link_key(e["title"])} for e in entries])
    conn.execute(INSERT_FTS, fts)  # each with its kind_token (app/notebook/search_index.py)
    rebuild_recent(conn)
    if tags:
        conn.execute(sa.text("INSERT INTO entry_tag (entry_id, tag) VALUES (:entry_id, :tag)"),
                     tags)


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]
