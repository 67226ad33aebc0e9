"""How long a save holds SQLite's write lock, for notes that render slowly.

    python -m bench.save_lock [--scale 1.0]

An app in this process (real SQLite file, the API through the test client) saves each
pathological note of issue-sized inputs (times --scale) and a plain one; for each it prints
the answer, the time to answer, and the longest the write lock was held during the save
(from BEGIN IMMEDIATE to COMMIT or ROLLBACK, seen through SQLAlchemy's connection events).
Then the resident memory of this process (the web worker's part) before the first long
note and after, and of the render children it started (app/notebook/render/isolated.py);
and last, each pathological note cut to isolated.SMALL characters rendered in-process, as
a note that short is: the slowest of these is what a short note can cost a worker thread.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import sqlalchemy as sa

from app import create_app, upgrades
from app.notebook.render import isolated, template

CASES = {  # name → (a note of about the size, at scale 1)
    "40k headings": lambda n: "".join(f"# heading {i}\n" for i in range(n)),
    "!!! note x50k": lambda n: "!!! note\n" * n,
    "`a x300k": lambda n: "`a " * n,
    "25k wiki links": lambda n: "".join(f"[[note {i}]] " for i in range(n)),
    "*_ x300k": lambda n: "*_" * n,
    "> x500": lambda n: ">" * n + " x",
    "plain short": lambda n: "A plain note with a [[link]].\n\n" * n,
    "plain long": lambda n: "A plain note with a [[link]].\n\n" * n,  # (in a child)
}
SIZES = {"40k headings": 40_000, "!!! note x50k": 50_000, "`a x300k": 300_000,
         "25k wiki links": 25_000, "*_ x300k": 300_000, "> x500": 500, "plain short": 64,
         "plain long": 2_000}


def rss_kib(pid: int | str = "self") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scale", type=float, default=1.0)
    scale = parser.parse_args().scale
    data = Path(tempfile.mkdtemp(prefix="save-lock-"))
    app = create_app({"DATA_DIR": data, "DATABASE_URL": f"sqlite:///{data}/c.db",
                      "AUTH_MODE": "dev", "OWNERS": [], "VIEWERS": [], "TESTING": True})
    db = app.extensions["db"]
    upgrades.upgrade(db, data / "backups")
    held: list[float] = []
    began: dict[int, float] = {}

    @sa.event.listens_for(db.engine, "begin")
    def _began(conn):
        if conn.get_execution_options().get("sqlite_immediate"):
            began[id(conn)] = time.perf_counter()

    def _ended(conn):
        start = began.pop(id(conn), None)
        if start is not None:
            held.append(time.perf_counter() - start)

    sa.event.listen(db.engine, "commit", _ended)
    sa.event.listen(db.engine, "rollback", _ended)

    client = app.test_client()
    client.post("/api/v1/entries", json={"title": "warm", "body": "warm *up*"})
    before = rss_kib()
    print(f"scale {scale:g}; render limit {isolated.TIME_LIMIT_S:g} s, in-process up to "
          f"{isolated.SMALL} characters")
    for name, make in CASES.items():
        body = make(max(1, int(SIZES[name] * scale)))
        held.clear()
        start = time.perf_counter()
        r = client.post("/api/v1/entries", json={"title": name, "body": body})
        took = time.perf_counter() - start
        print(f"  {name:<16} {len(body) / 1000:>7.0f} kB  {r.status_code}  answered in "
              f"{took:6.2f} s  write lock held at most {max(held, default=0) * 1000:7.1f} ms")
    children = [c.proc.pid for c in isolated._POOL.idle if c.proc.poll() is None]
    print(f"this process: {before / 1024:.1f} MiB resident before the long notes, "
          f"{rss_kib() / 1024:.1f} MiB after; render children: "
          + (", ".join(f"{rss_kib(pid) / 1024:.1f} MiB" for pid in children) or "none idle"))
    print(f"in-process, cut to {isolated.SMALL} characters:")
    for name, make in CASES.items():
        body = make(SIZES[name])[:isolated.SMALL]
        start = time.perf_counter()
        try:
            template.template(body)
            outcome = "rendered"
        except RecursionError:
            outcome = "RecursionError"
        print(f"  {name:<16} {outcome:<15} in {(time.perf_counter() - start) * 1000:7.1f} ms")


if __name__ == "__main__":
    main()
