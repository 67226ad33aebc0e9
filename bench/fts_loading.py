"""What merging less while an import loads saves, and what the index answers afterwards.

    .venv/bin/python bench/fts_loading.py [--entries 100000]

Writes the import bench's notes (bench/importing.py: a Zipf vocabulary, tags, links, code),
then loads their titles, tags and bodies (the markdown as written; the import indexes
the rendered text, of about the same size) into the notebook's full-text index (the
migrated schema: entry_fts with its prefix indexes) in batches of 500, one transaction
each, as `commonplace import` does, twice in fresh databases:

  usual     FTS5's default: a level merged once it holds 4 segments
  loading   app/notebook/search_index.py start_loading (merge at 16) before the first batch,
            finish_loading (back to 4, then all merged into one segment, a
            transaction at a time) after the last

It prints the CPU seconds of each (the loading time and the final merge), their ratio,
and the same ranked queries (bm25 with the column weights, LIMIT 20: words, prefixes, a
phrase) against each index, p50 and p95. Nothing here asserts a timing.
"""

from __future__ import annotations

import argparse
import random
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app import create_app, upgrades  # noqa: E402
from app.notebook import search_index  # noqa: E402
from app.notebook.mirror import parse_file  # noqa: E402
from bench.importing import generate  # noqa: E402

BATCH = 500
INSERT = "INSERT INTO entry_fts (rowid, title, tags, body, kind) VALUES (?, ?, ?, ?, ?)"
RANKED = ("SELECT rowid FROM entry_fts WHERE entry_fts MATCH ? "
          "ORDER BY bm25(entry_fts, 10, 5, 1, 0) LIMIT 20")


def rows_of(n: int, work: Path) -> list[tuple]:
    folder = work / "notes-in"
    generate(folder, n)
    parsed = [parse_file(path) for path in sorted(folder.rglob("*.md"))]
    shutil.rmtree(folder)
    return [(i + 1, p.title, " ".join(p.tags), p.body, search_index.kind_token(p.kind))
            for i, p in enumerate(parsed)]


def queries(rows: list[tuple], seed: int = 3) -> list[str]:
    rng = random.Random(seed)
    words = [w for row in rows[:400] for w in row[3].split() if w.isalpha() and len(w) > 4]
    return ([rng.choice(words) for _ in range(60)]
            + [rng.choice(words)[:3] + "*" for _ in range(25)]
            + [rng.choice(words)[:2] + "*" for _ in range(10)]
            + [f'"{rng.choice(words)} {rng.choice(words)}"' for _ in range(10)])


def load(work: Path, name: str, rows: list[tuple], loading: bool) -> tuple[float, float, Path]:
    data = work / name
    app = create_app({"DATA_DIR": data, "DATABASE_URL": f"sqlite:///{data}/c.db",
                      "TIMEZONE": "UTC"})
    db = app.extensions["db"]
    upgrades.upgrade(db, data / "backups")
    started = time.process_time()
    for i in range(0, len(rows), BATCH):
        with db.write() as session:
            if loading and i == 0:
                search_index.start_loading(session)
            dbapi = session.connection().connection.dbapi_connection
            dbapi.executemany(INSERT, rows[i:i + BATCH])
    loaded = time.process_time() - started
    if loading:
        search_index.finish_loading(db)
    db.engine.dispose()
    return loaded, time.process_time() - started - loaded, data / "c.db"


def answer(path: Path, asked: list[str]) -> list[float]:
    conn = sqlite3.connect(path)
    times = []
    for rep in range(2):  # the first pass warms the page cache
        for q in asked:
            started = time.perf_counter()
            conn.execute(RANKED, (q,)).fetchall()
            if rep:
                times.append((time.perf_counter() - started) * 1000)
    conn.close()
    return sorted(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=100_000)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="cp-fts-"))
    try:
        rows = rows_of(args.entries, work)
        asked = queries(rows)
        print(f"{len(rows)} notes, batches of {BATCH}; CPU s and ranked query ms")
        print(f"  {'':8} {'load s':>7} {'merge s':>8} {'total s':>8} {'p50 ms':>7} {'p95 ms':>7}")
        totals = {}
        for name, loading in (("usual", False), ("loading", True)):
            loaded, merged, path = load(work, name, rows, loading)
            times = answer(path, asked)
            totals[name] = loaded + merged
            print(f"  {name:8} {loaded:7.1f} {merged:8.1f} {loaded + merged:8.1f} "
                  f"{times[len(times) // 2]:7.2f} {times[int(len(times) * 0.95)]:7.2f}")
        print(f"  loading / usual: {totals['loading'] / totals['usual']:.2f} of the CPU")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
