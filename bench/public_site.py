"""The public site (`commonplace publish`): a notebook of LETTERS weekly letters, each with
a run card and three notes linking to it (half of everything public), published to a
folder; then the same publish again (nothing changed), then after one entry is made
private. Printed: the files, the seconds of each publish and what each wrote; then,
with Lighthouse installed (LIGHTHOUSE=path to its CLI, CHROME_PATH=a Chromium), its
mobile scores for Home, the newest letter, the Site Map and Search, served on loopback.

    python -m bench.public_site [LETTERS]      (default 20; the tests use a handful)
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import sqlalchemy as sa

from app import create_app, upgrades
from app.journal import runs
from app.journal.views import cards
from app.models import Entry
from app.notebook import entries
from app.publishing import output, preview, site

RESULT = {"strategies": [{
    "strategy": "ddp", "label": "DDP", "correctness": {"passed": True, "max_grad_abs_error": 1e-9},
    "step_time_s": {"median": 0.02, "p10": 0.019, "p90": 0.03},
    "prediction": {"step_time_s": 0.01, "dominant": "comm", "residual_s": -0.002,
                   "unmodelled": ["hooks"]},
    "ratios": {"step_time": 2.0}, "tokens_per_s": 1000.0,
    "memory": [{"rank": 0, "peak": {"measured": 950, "predicted": 1000, "ratio": 0.95}}]}]}


def notebook(data: Path, letters: int):
    app = create_app({"DATA_DIR": data, "DATABASE_URL": f"sqlite:///{data}/commonplace.db",
                      "AUTH_MODE": "dev", "TIMEZONE": "UTC"})
    db = app.extensions["db"]
    upgrades.upgrade(db, data / "backups")
    monday = dt.date(2024, 1, 1)
    with db.write() as s:
        for n in range(letters):
            run = runs.create(s, "data_parallel", {"steps": 1, "warmup": 0}, actor="bench")
            run.status, run.result = "SUCCEEDED", RESULT
            run.finished_at = dt.datetime.combine(monday, dt.time(12))
            s.flush()
            week = monday + dt.timedelta(weeks=n)
            notes = [entries.create(s, author="bench", date=week + dt.timedelta(days=d),
                                    title=f"Note {n}.{d}", tags=["parallelism"],
                                    publish=d % 2 == 0,
                                    body=f"On pipeline bubbles, week {n}. [[{week}]]")
                     for d in range(3)]
            entries.create(s, author="bench", kind="week", date=week, title=f"Week {n}",
                           publish=n % 2 == 0, body="\n\n".join(
                               [f"- [[{note.title}]]" for note in notes] + [cards.block(run.id)]))
    return app, db


def publish(db, data: Path, folder: Path) -> tuple[int, output.Written, float]:
    started = time.perf_counter()
    with db.read() as session:
        files = site.build(session, site.Options(data, "https://notes.example.org/"))
    done = output.write(folder, files)
    return len(files), done, time.perf_counter() - started


def lighthouse(folder: Path, pages: list[str]) -> None:
    cli, chrome = os.environ.get("LIGHTHOUSE"), os.environ.get("CHROME_PATH")
    if not (cli and chrome):
        print("lighthouse: set LIGHTHOUSE and CHROME_PATH to run it")
        return
    with preview.server(folder) as httpd:
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        for page in pages:
            url = f"http://127.0.0.1:{httpd.server_address[1]}/{page}"
            report = subprocess.run(
                [cli, url, "--output=json", "--quiet", "--chrome-flags=--headless=new --no-sandbox",
                 "--only-categories=performance,accessibility,best-practices,seo"],
                capture_output=True, text=True, timeout=300, check=True)
            found = json.loads(report.stdout)
            scores = {k: round(v["score"] * 100) for k, v in found["categories"].items()}
            audits = {a: found["audits"][a]["displayValue"] for a in (
                "largest-contentful-paint", "cumulative-layout-shift", "total-byte-weight")}
            print(f"lighthouse {page}: {scores} {audits}")
        httpd.shutdown()


def main() -> None:
    letters = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    with tempfile.TemporaryDirectory() as tmp:
        data, folder = Path(tmp) / "data", Path(tmp) / "site"
        data.mkdir()
        _, db = notebook(data, letters)
        for label in ("first", "again, unchanged"):
            files, done, seconds = publish(db, data, folder)
            print(f"publish {label}: {files} files, {len(done.written)} written, "
                  f"{len(done.removed)} removed in {seconds:.2f} s")
        with db.write() as s:
            note = s.scalar(sa.select(Entry).where(Entry.publish.is_(True),
                                                   Entry.kind == "entry").limit(1))
            entries.update(s, note, {"publish": False}, base_revision=note.revision,
                           author="bench")
        files, done, seconds = publish(db, data, folder)
        print(f"publish after one note made private: {files} files, {len(done.written)} "
              f"written, {len(done.removed)} removed in {seconds:.2f} s")
        newest = sorted(folder.glob("weeks/*.html"))[-1].relative_to(folder).as_posix()
        lighthouse(folder, ["index.html", newest, "sitemap.html", "search.html"])


if __name__ == "__main__":
    main()
