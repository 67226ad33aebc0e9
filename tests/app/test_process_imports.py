"""What each of `commonplace up`'s processes loads: nothing it does not use.

The supervisor only starts and watches (the standard library); the scheduler is a clock
that lives for days and holds no ORM (APScheduler and sqlite3: no SQLAlchemy, no click, no
Flask, no Alembic, no renderer, no torch), its jobs' work done in children that load them
and exit;
the web's master makes the app before it forks the workers, so making it must open no
connection and start no thread. (The runner's own check is in tests/app/test_deploy.py.)
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from app import supervisor
from app.journal import runs
from app.models import Run
from app.notebook import letters
from tests.helpers import ROOT, free_port, load, stop_process

# What neither the supervisor nor the scheduler at rest may hold, by top-level package.
SERVER = ("flask", "werkzeug", "jinja2", "markupsafe", "alembic", "mako", "markdown",
          "pygments", "nh3", "torch", "numpy", "gunicorn")


def loaded(code: str, **env: str) -> set[str]:
    """The modules a fresh interpreter holds after running `code`."""
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys; print(*sys.modules)"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={**os.environ, **env})
    assert out.returncode == 0, out.stderr
    return set(out.stdout.split())


def test_up_becomes_the_supervisor_by_its_module():
    argv = supervisor.command("http://127.0.0.1:8000", ["127.0.0.1:8000"])
    assert argv[:3] == [sys.executable, "-m", "app.supervisor"]


def test_the_supervisor_imports_only_the_standard_library():
    """As `python -m app.supervisor` runs it: the package, then the module's code (as
    __main__, so not in sys.modules itself)."""
    bare = loaded("pass")
    held = loaded("import runpy; runpy.run_module('app.supervisor')")
    extra = {m for m in held - bare if m.split(".")[0] not in sys.stdlib_module_names}
    assert extra == {"app"}
    assert not {m for m in held if m.split(".")[0] in (*SERVER, "sqlalchemy", "click")}


def start_scheduler(db, data_dir, argv: list[str]) -> tuple[subprocess.Popen, Path]:
    """The real scheduler, as `up` starts it, in a notebook with this week's letter (as `up`
    makes it before), once it says it started; its output goes to the returned path."""
    letters.ensure_this_week(db, "UTC")
    db.engine.dispose()
    log = data_dir / "scheduler.log"
    env = {**os.environ, "COMMONPLACE_DATA_DIR": str(data_dir), "COMMONPLACE_AUTH": "dev",
           "COMMONPLACE_BIND": f"127.0.0.1:{free_port()}", "COMMONPLACE_TIMEZONE": "UTC"}
    env.pop("COMMONPLACE_DATABASE_URL", None)
    with open(log, "w") as out:
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=out)
    try:
        deadline = time.monotonic() + 60
        while "scheduler started" not in log.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
    except BaseException:
        stop_process(proc)
        raise
    return proc, log


def test_up_starts_the_scheduler_by_its_own_entry():
    assert supervisor.SCHEDULER_COMMAND == [sys.executable, "-m", "app.scheduler"]


def test_commonplace_scheduler_becomes_the_scheduler_entry(db, data_dir):
    """`commonplace scheduler` (systemd, compose, the tests) execs the entry `up` starts:
    the same process, which holds no click."""
    proc, _log = start_scheduler(db, data_dir, [sys.executable, "-m", "app.cli", "scheduler"])
    try:
        argv = Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0")
        assert argv[1:3] == [b"-m", b"app.scheduler"]
    finally:
        stop_process(proc)


def test_the_scheduler_holds_no_orm_while_its_children_do_the_work(db, data_dir):
    """The scheduler's entry with `-X importtime`, which writes every module the process
    imports, at start or later, to stderr (its children, started without the flag, write
    nothing): started, a finished run's card posted to its letter by a child, then stopped."""
    with db.write() as session:
        run = runs.create(session, "collectives", {}, actor="t")
        runs.transition(session, run, "FAILED", actor="t", reason="for its card")
        run_id = run.id
    proc, log = start_scheduler(db, data_dir, [sys.executable, "-X", "importtime", "-m",
                                               "app.scheduler"])
    try:
        deadline = time.monotonic() + 60
        while load(db, Run, run_id).carded_entry_id is None:
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        time.sleep(6)  # every interval job (sync, cards, alerts, reap) asks at least once more
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        stop_process(proc)
    text = log.read_text()
    assert "scheduler stopped" in text
    held = set(re.findall(r"^import time:\s+\d+ \|\s+\d+ \|\s*(\S+)$", text, re.MULTILINE))
    assert {"apscheduler.schedulers.blocking", "apscheduler.triggers.cron", "sqlite3",
            "app.journal.clock", "app.journal.waiting"} <= held
    bad = sorted(m for m in held if m.split(".")[0] in (*SERVER, "click", "sqlalchemy")
                 or m.startswith(("app.web", "app.cli", "app.db", "app.models", "app.notebook",
                                  "app.backups", "app.journal.scheduler", "app.journal.views",
                                  "app.journal.posting", "app.journal.alerts",
                                  "app.journal.runs", "app.journal.schedules",
                                  "app.journal.trends")))
    assert bad == []


def test_db_upgrade_migrates_without_the_web(db, data_dir):
    """`commonplace db upgrade`, which the scheduler runs in a child at every start (and
    systemd and compose before the web), migrates with the backend: no Flask, no pages."""
    code = "from app.cli import main\nmain(['db', 'upgrade'], standalone_mode=False)"
    env = {key: value for key, value in os.environ.items() if key != "COMMONPLACE_DATABASE_URL"}
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys; print(*sys.modules)"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={**env, "COMMONPLACE_DATA_DIR": str(data_dir),
                              "COMMONPLACE_TIMEZONE": "UTC"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("database is up to date")
    held = set(out.stdout.split())
    assert {"alembic", "app.upgrades", "app.notebook.rerender"} <= held
    assert not {m for m in held if m.split(".")[0] in ("flask", "werkzeug", "jinja2", "torch")
                or m.startswith("app.web")}


def test_commonplace_web_checks_its_addresses_without_the_web(data_dir):
    """`commonplace web` checks where it may listen and execs gunicorn, whose master makes
    the app: the check itself loads no Flask. Refused here (dev mode on every address), so
    `-X importtime` lists what the command loaded up to the check and nothing after."""
    env = {**os.environ, "COMMONPLACE_DATA_DIR": str(data_dir), "COMMONPLACE_AUTH": "dev",
           "COMMONPLACE_BIND": f"0.0.0.0:{free_port()}", "COMMONPLACE_TIMEZONE": "UTC"}
    out = subprocess.run([sys.executable, "-X", "importtime", "-m", "app.cli", "web"], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "refusing to listen on" in out.stderr, out.stderr[-500:]
    held = set(re.findall(r"^import time:\s+\d+ \|\s+\d+ \|\s*(\S+)$", out.stderr, re.MULTILINE))
    assert {"click", "app.config", "app.port_holder"} <= held
    assert not {m for m in held if m.split(".")[0] in ("flask", "werkzeug", "sqlalchemy")
                or m.startswith("app.web")}


def test_making_the_app_opens_no_connection_and_starts_no_thread(data_dir):
    """gunicorn makes the app in its master and forks the workers from it (preload_app):
    a connection or a thread made there would be shared by every worker, or lost."""
    code = """
import os, threading
from app import create_app
app = create_app()
pool = app.extensions["db"].engine.pool
assert threading.active_count() == 1, threading.enumerate()
assert not pool.idle
files = []
for fd in os.listdir("/proc/self/fd"):
    try:
        files.append(os.readlink(f"/proc/self/fd/{fd}"))
    except OSError:  # the listing's own
        pass
assert not [f for f in files if "commonplace.db" in f], files
"""
    loaded(code, COMMONPLACE_DATA_DIR=str(data_dir), COMMONPLACE_TIMEZONE="UTC")
