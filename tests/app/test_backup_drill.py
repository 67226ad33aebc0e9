"""The backup drill, through real processes: `commonplace up` (web, scheduler, a CPU
runner), a notebook with revisions, tags, links, an attachment and a finished run with its
log, artifacts and card in the letter; `commonplace backup` while a writer keeps saving;
`commonplace restore` into a fresh data dir; and everything compared: every row of every
table the archive holds, every attachment, log and artifact byte, and every save the
writer had acknowledged before the backup began."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from tests.helpers import ROOT

TABLES = ("entry", "revision", "link", "entry_tag", "attachment", "setting", "run", "run_event",
          "metric", "run_artifact", "schedule", "runner", "token")
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4


def api(base: str, path: str, body: dict | None = None, method: str | None = None) -> dict:
    request = urllib.request.Request(base + path, method=method or ("POST" if body else "GET"),
                                     data=json.dumps(body).encode() if body else None,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)


def upload(base: str, entry_id: int) -> dict:
    boundary = "drill"
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; "
            f"filename=\"chart.png\"\r\nContent-Type: image/png\r\n\r\n").encode() + PNG + \
        f"\r\n--{boundary}--\r\n".encode()
    request = urllib.request.Request(
        f"{base}/api/v1/entries/{entry_id}/attachments", data=body, method="POST",
        headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)


def cli(data_dir: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "COMMONPLACE_DATA_DIR": str(data_dir), "COMMONPLACE_AUTH": "dev",
           "COMMONPLACE_TIMEZONE": "UTC"}
    env.pop("COMMONPLACE_DATABASE_URL", None)
    return subprocess.run([sys.executable, "-m", "app.cli", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=180)


def rows(database: Path, table: str, where: str = "") -> list:
    with contextlib.closing(sqlite3.connect(database)) as db:
        return sorted(map(repr, db.execute(f"SELECT * FROM {table} {where}")))


def wait_for(what, check, timeout: float):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (value := check()):
            return value
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def test_backup_while_saving_then_restore_is_identical(live_server, data_dir, tmp_path):
    base = live_server
    first = api(base, "/api/v1/entries", {"title": "Ring", "body": "all-reduce #comm",
                                          "tags": ["gpu"]})
    api(base, f"/api/v1/entries/{first['id']}", {"body": "ring all-reduce #comm",
                                                   "base_revision": 1}, method="PUT")
    second = api(base, "/api/v1/entries", {"title": "Tree", "body": "see [[Ring]]"})
    upload(base, second["id"])
    run = api(base, "/api/v1/runs", {"experiment": "gemm_roofline",
                                     "params": {"sizes": ["64"], "iters": 2}})
    wait_for("the run to finish", lambda: api(base, f"/api/v1/runs/{run['id']}")["status"]
             in ("SUCCEEDED", "FAILED"), 120)
    wait_for("its card in the letter",
             lambda: api(base, f"/api/v1/runs/{run['id']}")["letter_entry_id"], 60)

    acknowledged: list[tuple[float, int]] = []
    stop = threading.Event()

    def writer():
        n = 0
        while not stop.is_set() and n < 400:
            saved = api(base, "/api/v1/entries", {"title": f"Note {n}", "body": f"text {n}"})
            acknowledged.append((time.monotonic(), saved["id"]))
            n += 1

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    wait_for("the writer to get going", lambda: len(acknowledged) >= 5, 30)
    began = time.monotonic()
    archive = tmp_path / "notes.tar.gz"
    made = cli(data_dir, "backup", "--to", str(archive))
    stop.set()
    thread.join(timeout=30)
    assert made.returncode == 0, made.stderr
    assert cli(data_dir, "backup", "--verify", str(archive)).returncode == 0

    restored = tmp_path / "restored"
    done = cli(data_dir, "restore", str(archive), "--data-dir", str(restored))
    assert done.returncode == 0, done.stderr
    assert "restored" in done.stdout

    live, back = data_dir / "commonplace.db", restored / "commonplace.db"
    entry_ids = {int(r.split(",")[0].strip("(")) for r in rows(back, "entry")}
    before = {entry_id for at, entry_id in acknowledged if at < began}
    assert before <= entry_ids  # every save acknowledged before the backup is there
    ids = ",".join(map(str, sorted(entry_ids)))
    for table, where in (("entry", f"WHERE id IN ({ids})"),
                         ("revision", f"WHERE entry_id IN ({ids})"),
                         ("entry_tag", f"WHERE entry_id IN ({ids})"),
                         ("link", f"WHERE source_id IN ({ids})"),
                         ("attachment", ""), ("run", ""), ("run_event", ""),
                         ("run_artifact", ""), ("metric", ""), ("setting", "")):
        assert rows(back, table, where) == rows(live, table, where), table
    for path in (data_dir / "attachments").rglob("*"):
        if path.is_file() and "tmp" not in path.parts:
            assert (restored / path.relative_to(data_dir)).read_bytes() == path.read_bytes()
    run_dir = Path("runs") / str(run["id"])
    for name in ["log.txt", *(f"artifacts/{p.name}" for p in
                               (data_dir / run_dir / "artifacts").iterdir())]:
        assert (restored / run_dir / name).read_bytes() == (data_dir / run_dir / name).read_bytes()
    assert (restored / "notes").is_dir() and any((restored / "notes").rglob("*.md"))
