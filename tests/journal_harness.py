"""A notebook's journal as real processes, for the end-to-end tests: `Journal` starts
gunicorn (`commonplace web`), the scheduler and runner agents on one data directory, with
short lease settings (TTL 4 s, reaper every 1 s) so that fault drills are quick on the
production code paths; `api`, `wait_until` and the process probes are what the drills read
it with. Every wait has a deadline; only processes started here are ended, by PID."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from app import db as dbmod
from tests.helpers import ROOT, add_token, free_port, stop_process, wait_for_http
from tests.tailnet import migrate

TTL, REAPER = 4, 1
PLUGINS = ROOT / "tests" / "jobs" / "lab" / "plugins"
QUICK = {"steps": 1, "warmup": 0}
# a run that only has to be running (its dp_naive sleeps: tests/jobs/lab/plugins): one strategy, so
# no rank imports torch._dynamo (~2 s CPU each, for PyTorch's DDP) before it sleeps
SLEEPER = {**QUICK, "strategies": ["dp_naive"]}


def api(base, path, body=None, method=None):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(base + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            payload = response.read()
            return response.status, (json.loads(payload) if payload[:1] in b"{[" else payload)
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def wait_until(what, check, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead for our purposes
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def group_alive(pgid: int) -> bool:
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                return True
    return False


def processes_of(out: Path) -> list[int]:
    """Live processes working for one run: its launcher, torchrun and every rank carry the
    run's output folder on their command line (ranks run in sessions of their own, so a
    process group alone would not find them)."""
    needle = str(out).encode()
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if needle in (proc / "cmdline").read_bytes() and alive(int(proc.name)):
                    found.append(int(proc.name))
            except OSError:
                continue
    return found


class Journal:
    """A notebook server with its scheduler, and runners started on demand."""

    def __init__(self, data_dir: Path):
        self.data_dir = data_dir
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.env = {**os.environ, "COMMONPLACE_DATA_DIR": str(data_dir),
                    "COMMONPLACE_BIND": f"127.0.0.1:{self.port}", "COMMONPLACE_AUTH": "dev",
                    "COMMONPLACE_TIMEZONE": "UTC", "COMMONPLACE_LEASE_TTL": str(TTL),
                    "COMMONPLACE_REAPER_INTERVAL": str(REAPER),
                    # an idle runner stops within its poll: 2 s, not 10, per teardown
                    "COMMONPLACE_RUNNER_POLL_WAIT": "2"}
        self.env.pop("COMMONPLACE_DATABASE_URL", None)
        self.env.pop("COMMONPLACE_LAB_PLUGIN", None)
        self.procs: list[subprocess.Popen] = []
        self.logs = []

    def cli(self, *args) -> str:
        out = subprocess.run([sys.executable, "-m", "app.cli", *args], cwd=ROOT, env=self.env,
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        return out.stdout

    def spawn(self, name: str, args: list[str], env: dict | None = None) -> subprocess.Popen:
        log = open(self.data_dir / f"{name}.log", "w")
        self.logs.append(log)
        proc = subprocess.Popen([sys.executable, "-m", "app.cli", *args], cwd=ROOT,
                                env={**self.env, **(env or {})}, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append(proc)
        return proc

    def start(self) -> None:
        migrate(self.env)  # `commonplace db upgrade`, in this process
        self.start_web()
        self.start_scheduler()

    def start_web(self) -> None:
        self.web = self.spawn("web", ["web"])
        wait_for_http(self.base + "/healthz", proc=self.web)

    def start_scheduler(self) -> None:
        """The scheduler, once its first work is done: on a loaded host, this week's letter
        made while a test was counting entries was an entry it had not made."""
        self.scheduler = self.spawn("scheduler", ["scheduler"])
        log = self.data_dir / "scheduler.log"
        wait_until("the scheduler to start", lambda: self.scheduler.poll() is not None or
                   "scheduler started" in log.read_text(), 120)
        assert self.scheduler.poll() is None, log.read_text()[-3000:]

    def status_in_db(self, run_id: int) -> str:
        """A run's status read from the database itself (while the web is down)."""
        with contextlib.closing(sqlite3.connect(self.data_dir / "commonplace.db")) as db:
            return db.execute("SELECT status FROM run WHERE id = ?", (run_id,)).fetchone()[0]

    def token(self, name: str, role: str = "runner") -> str:
        """A token stored as `commonplace token create` stores it, written from this process:
        the CLI would start a Python that imports the whole app for every runner
        (tests/app/web/test_tokens.py drives the command itself)."""
        database = dbmod.Database(f"sqlite:///{self.data_dir / 'commonplace.db'}")
        try:
            return add_token(database, name, role)
        finally:
            database.engine.dispose()

    def runner(self, name: str, plugin: str | None = None) -> subprocess.Popen:
        token = self.token(name)
        env = {"COMMONPLACE_RUNNER_TOKEN": token}
        if plugin:
            env["COMMONPLACE_LAB_PLUGIN"] = str(PLUGINS / plugin)
        work = self.data_dir / f"runner-{name}"
        return self.spawn(f"runner-{name}", ["runner", "--server", self.base,
                                             "--work-dir", str(work)], env)

    def create(self, experiment="data_parallel", **params) -> int:
        status, body = api(self.base, "/api/v1/runs", {"experiment": experiment,
                                                       "params": params})
        assert status == 201, body
        return body["id"]

    def run(self, run_id: int) -> dict:
        return api(self.base, f"/api/v1/runs/{run_id}")[1]

    def wait_status(self, run_id: int, statuses, timeout: float = 120) -> dict:
        statuses = {statuses} if isinstance(statuses, str) else set(statuses)
        return wait_until(f"run {run_id} to be {statuses}",
                          lambda: (r := self.run(run_id))["status"] in statuses and r, timeout)

    def pids(self, runner: str, run_id: int) -> dict:
        path = wait_until("the lab's pids.json", lambda: next(
            (self.data_dir / f"runner-{runner}").glob(f"run-{run_id}-epoch-*/lab/pids.json"),
            None), 60)
        pids = wait_until("pids", lambda: _read_json(path), 10)
        pids["out"] = path.parent
        # the ranks are up (not just torchrun) before a drill begins
        wait_until("the ranks", lambda: len(processes_of(path.parent)) >= 4, 60)
        return pids

    def stop(self) -> None:
        """Every process it started, by PID: the runners first, all at once (each ends its
        long poll and tells the web), then the scheduler and the web together."""
        runners = [proc for proc in self.procs if "runner" in proc.args]
        for group in (runners, [proc for proc in self.procs if proc not in runners]):
            _end(group)
        for log in self.logs:
            log.close()

    def tidy(self, since: int) -> None:
        """The server as a test found it, for the next test of a shared one: the runners
        started since `since` (an index into `procs`) ended by PID, a run still queued
        cancelled (a scheduled fire no runner took), and the web and the scheduler running
        again if the test stopped or killed them."""
        _end([proc for proc in self.procs[since:] if "runner" in proc.args])
        if self.web.poll() is not None:
            self.start_web()
        queued = api(self.base, "/api/v1/runs?status=QUEUED&limit=500")[1]["runs"]
        for run in queued:
            api(self.base, f"/api/v1/runs/{run['id']}/cancel", {}, "POST")
        if self.scheduler.poll() is not None:
            self.start_scheduler()


def _end(procs: list[subprocess.Popen]) -> None:
    """Processes we started, by PID: told to stop all at once (each may be ending a long
    poll), then waited for, killed if they will not."""
    for proc in procs:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGCONT)  # in case a drill froze it
                proc.terminate()
            except ProcessLookupError:
                pass
    for proc in procs:
        stop_process(proc)


def _read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
