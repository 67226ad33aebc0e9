"""What each of `commonplace up`'s processes loads: nothing it does not use.

The supervisor only starts and watches (the standard library); the scheduler serves no page
and renders only when a card reaches a letter (no Flask, no Alembic, no renderer at rest);
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

from app import supervisor
from app.notebook import letters
from tests.helpers import ROOT, free_port, stop_process

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


def test_the_scheduler_at_rest_holds_neither_the_web_nor_the_renderer(db, data_dir):
    """The real `commonplace scheduler`, as `up` starts it, with `-X importtime`, which
    writes every module the process imports, at start or later, to stderr: started, its
    jobs run once, then stopped."""
    letters.ensure_this_week(db, "UTC")  # as `up` does before it starts the scheduler
    db.engine.dispose()
    log = data_dir / "scheduler.log"
    env = {**os.environ, "COMMONPLACE_DATA_DIR": str(data_dir), "COMMONPLACE_AUTH": "dev",
           "COMMONPLACE_BIND": f"127.0.0.1:{free_port()}", "COMMONPLACE_TIMEZONE": "UTC"}
    env.pop("COMMONPLACE_DATABASE_URL", None)
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-X", "importtime", "-m", "app.cli",
                                 "scheduler"], cwd=ROOT, env=env, stdout=out, stderr=out)
    try:
        deadline = time.monotonic() + 60
        while "scheduler started" not in log.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        time.sleep(4)  # every interval job (sync, cards) runs at least once
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    finally:
        stop_process(proc)
    held = set(re.findall(r"^import time:\s+\d+ \|\s+\d+ \|\s*(\S+)$", log.read_text(),
                          re.MULTILINE))
    assert {"sqlalchemy.orm", "apscheduler.schedulers.blocking", "app.journal.scheduler"} <= held
    bad = sorted(m for m in held if m.split(".")[0] in SERVER or m.startswith("app.web"))
    assert bad == []


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
