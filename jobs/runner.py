"""The runner agent: pulls runs from a Commonplace server and executes them with the lab.

    commonplace runner --server https://notes.tail1234.ts.net --token cp_…

It opens every connection itself (no inbound port on the GPU host): register, then a
loop of long-poll leases. A leased run is launched as `python -m jobs.lab run …` in its
own process group; this process — never the training processes — heartbeats the lease,
streams the log in sequenced chunks, uploads the result, and reports how the run ended.

If the server cannot be reached the run carries on: output is spooled to disk and sent
when the server answers again. If the server says our lease is stale (409: the run was
declared LOST, or leased again), the job is killed at once — two copies of one run must
never both report. Cancel arrives in a heartbeat reply: SIGTERM to the group, a grace
period, SIGKILL. No torch here: the lab runs in the child.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger("commonplace.runner")
REPO_ROOT = Path(__file__).resolve().parent.parent
PROGRESS_RE = re.compile(r"^progress step=(\d+) total=(\d+)(.*)$")
KV_RE = re.compile(r"(\w+)=(\S+)")
CHUNK = 60 * 1024  # below the server's 64 KiB cap
STALE_GRACE_S = 2.0  # a stale job stops at once, but torchrun gets a moment to end its ranks
VERSION = "1"

# The lab launcher's exit codes (jobs/lab/launch.py) → the journal's failure reasons.
EXIT_REASONS = {2: "invalid_params", 3: "correctness", 4: "exit_code", 5: "timeout",
                6: "unsupported", 7: "cancelled"}


class Stale(Exception):
    """The server no longer considers this lease ours: stop the job, report nothing."""


class Unreachable(Exception):
    """No answer (network, 5xx): keep going and try again later."""


class Refused(Exception):
    """A 4xx (other than a stale lease): our request was wrong as sent."""

    def __init__(self, message: str, code: str = "", details: dict | None = None):
        super().__init__(message)
        self.code = code
        self.details = details or {}


@dataclass
class Client:
    server: str
    token: str
    timeout: float = 40.0

    def call(self, method: str, path: str, body=None, *, raw: bytes | None = None,
             content_type: str = "application/json") -> dict | None:
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None
                                            else None)
        request = urllib.request.Request(
            self.server.rstrip("/") + path, data=data, method=method,
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": content_type,
                     "User-Agent": f"commonplace-runner/{VERSION}"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                payload = response.read()
                return json.loads(payload) if payload else None
        except urllib.error.HTTPError as exc:
            payload = exc.read()[:4000]
            detail = payload[:500].decode("utf-8", "replace")
            if exc.code >= 500:
                raise Unreachable(f"{exc.code}: {detail}") from None
            try:
                error = json.loads(payload).get("error", {})
            except (ValueError, AttributeError):
                error = {}
            # Only the server's word that the lease is no longer ours stops a job; any
            # other refusal (a log gap, a bad state) is handled where it happens.
            if exc.code == 409 and error.get("code") == "stale_lease":
                raise Stale(detail) from None
            raise Refused(f"{exc.code}: {detail}", error.get("code", ""), error) from None
        except (OSError, ValueError) as exc:  # URLError, timeouts, resets, bad JSON
            raise Unreachable(str(exc)) from None


def host_labels() -> dict:
    """What this host offers: runs that need GPUs only come to a runner that has them."""
    labels = {"host": socket.gethostname()[:60], "cpu_count": os.cpu_count() or 1,
              "platform": platform.machine(), "gpu_count": 0}
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=10).stdout
            names = [line.strip() for line in out.splitlines() if line.strip()]
            labels.update(gpu_count=len(names), gpu_model=names[0][:60] if names else "")
        except (OSError, subprocess.SubprocessError):
            pass
    return labels


def _die_with_parent() -> None:
    """In the child: if the agent dies (kill -9 included), the kernel sends SIGTERM, and
    the lab launcher then ends its torchrun group. A run nobody watches is a LOST run
    that would only burn the GPU."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


@dataclass
class Job:
    """One leased run being executed."""

    run_id: int
    epoch: int
    experiment: str
    params: dict
    out: Path
    proc: subprocess.Popen | None = None
    step: int = 0
    total: int = 0
    progress: dict = field(default_factory=dict)
    metrics: list = field(default_factory=list)
    stale: bool = False
    cancelled: bool = False
    log_sent: int = 0  # bytes of the spool the server has acknowledged
    spool_lock: threading.Lock = field(default_factory=threading.Lock)
    ship_lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def spool(self) -> Path:
        return self.out / "agent.log"


class Agent:
    def __init__(self, client: Client, work_dir: Path, *, labels: dict | None = None,
                 cancel_grace_s: float = 10.0):
        self.client = client
        self.work_dir = work_dir
        self.labels = labels if labels is not None else host_labels()
        self.cancel_grace_s = cancel_grace_s
        self.heartbeat_s = 15.0
        self.stopping = threading.Event()
        self.job: Job | None = None

    # -- the loop -------------------------------------------------------------------------

    def serve(self) -> None:
        self.register()
        while not self.stopping.is_set():
            try:
                # A short long-poll: a stop (Ctrl-C) is never more than ~10 s away.
                answer = self.client.call("POST", "/api/v1/runner/lease", {"wait": 10})
            except Unreachable as exc:
                log.warning("server unreachable (%s); retrying", exc)
                self.stopping.wait(5)
                continue
            except Refused as exc:
                log.error("lease refused: %s; registering again", exc)
                self.stopping.wait(5)
                self.register()
                continue
            if answer and answer.get("run"):
                self.heartbeat_s = float(answer.get("heartbeat_s", self.heartbeat_s))
                if self.stopping.is_set():  # leased while we were being stopped: hand back
                    spec = answer["run"]
                    self.report(Job(spec["id"], spec["epoch"], spec["experiment"],
                                    spec["params"], self.work_dir), "CANCELLED",
                                "the runner shut down before starting it", "cancelled", None)
                    return
                self.execute(answer["run"])

    def register(self) -> None:
        delay = 1.0
        while not self.stopping.is_set():
            try:
                answer = self.client.call("POST", "/api/v1/runner/register",
                                          {"labels": self.labels, "version": VERSION})
                self.heartbeat_s = float(answer.get("heartbeat_s", 15))
                log.info("registered as %s (heartbeat every %.1fs)", answer.get("runner"),
                         self.heartbeat_s)
                return
            except (Unreachable, Refused, Stale) as exc:
                log.warning("register failed: %s; retrying in %.0fs", exc, delay)
                self.stopping.wait(delay)
                delay = min(delay * 2, 30)

    # -- one run --------------------------------------------------------------------------

    def execute(self, spec: dict) -> None:
        job = Job(spec["id"], spec["epoch"], spec["experiment"], spec["params"],
                  self.work_dir / f"run-{spec['id']}-epoch-{spec['epoch']}")
        self.job = job
        job.out.mkdir(parents=True, exist_ok=True)
        job.spool.touch()
        log.info("run %s: %s %s", job.run_id, job.experiment, json.dumps(job.params))
        argv = [sys.executable, "-m", "jobs.lab", "run", job.experiment,
                "--params", json.dumps(job.params), "--out", str(job.out / "lab")]
        try:
            job.proc = subprocess.Popen(
                argv, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                start_new_session=True, preexec_fn=_die_with_parent,
                env={**os.environ, "PYTHONUNBUFFERED": "1"})
        except OSError as exc:
            self.report(job, "FAILED", f"could not start the lab: {exc}", "launch_failed", None)
            return
        self.report(job, "RUNNING", "", "", None, environment=self.labels)
        reader = threading.Thread(target=self._read_output, args=(job,), daemon=True)
        beat = threading.Thread(target=self._heartbeat_loop, args=(job,), daemon=True)
        ship = threading.Thread(target=self._ship_logs_loop, args=(job,), daemon=True)
        for thread in (reader, beat, ship):
            thread.start()
        rc = job.proc.wait()
        reader.join(timeout=10)
        ship.join(timeout=5)
        self.job = None
        if job.stale:
            log.warning("run %s: lease lost; the job was stopped and nothing is reported",
                        job.run_id)
            return
        self.finish(job, rc)

    def shutdown(self) -> None:
        """Stop taking work; a run in progress is cancelled and reported CANCELLED — never
        a silent SUCCEEDED, never left to be found LOST."""
        self.stopping.set()
        job = self.job
        if job is not None and job.proc is not None and not job.cancelled:
            job.cancelled = True
            threading.Thread(target=self.stop_job, args=(job,), daemon=True).start()

    def _read_output(self, job: Job) -> None:
        for raw in job.proc.stdout:
            line = raw.decode("utf-8", "replace")
            with job.spool_lock, open(job.spool, "a", encoding="utf-8") as fh:
                fh.write(line)
            match = PROGRESS_RE.match(line.strip())
            if match:
                job.step, job.total = int(match[1]), int(match[2])
                info = dict(KV_RE.findall(match[3]))
                job.progress = {k: _number(v) for k, v in info.items()}
                if "tokens_per_s" in info:
                    job.metrics.append({"key": "tokens_per_s", "step": job.step,
                                        "value": float(job.progress["tokens_per_s"])})

    def _heartbeat_loop(self, job: Job) -> None:
        """Renew the lease every heartbeat_s, and sooner (at most once a second) when there
        is new progress to show: the run page is live without a second channel."""
        last_sent, last_step = 0.0, -1
        while job.proc.poll() is None:
            now = time.monotonic()
            if now - last_sent < self.heartbeat_s and job.step == last_step:
                time.sleep(1.0)
                continue
            last_sent, last_step = now, job.step
            try:
                answer = self.client.call(
                    "POST", f"/api/v1/runner/runs/{job.run_id}/heartbeat",
                    {"epoch": job.epoch, "step": job.step, "total": job.total,
                     "progress": job.progress})
                if answer and answer.get("cancel") and not job.cancelled:
                    log.info("run %s: cancel requested", job.run_id)
                    job.cancelled = True
                    threading.Thread(target=self.stop_job, args=(job,), daemon=True).start()
            except Stale as exc:
                log.error("run %s: server says the lease is stale (%s): killing", job.run_id,
                          exc)
                job.stale = True
                self.stop_job(job, grace_s=STALE_GRACE_S)
                return
            except (Unreachable, Refused) as exc:
                log.warning("run %s: heartbeat failed (%s); the run continues", job.run_id,
                            exc)
            time.sleep(1.0)

    def stop_job(self, job: Job, grace_s: float | None = None) -> None:
        """SIGTERM to the job's process group, a grace period, then SIGKILL to it and to the
        torchrun group the launcher recorded (in case the launcher itself is stuck)."""
        grace = self.cancel_grace_s if grace_s is None else grace_s
        _signal_group(job.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while job.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        for pgid in (job.proc.pid, _torchrun_pgid(job.out / "lab")):
            if pgid:
                _signal_group(pgid, signal.SIGKILL)

    # -- logs -----------------------------------------------------------------------------

    def _ship_logs_loop(self, job: Job) -> None:
        while True:
            done = job.proc.poll() is not None
            try:
                self.ship_logs(job)
            except Stale:
                job.stale = True
                self.stop_job(job, grace_s=STALE_GRACE_S)
                return
            except Unreachable:
                pass  # spooled on disk; sent when the server answers
            except Refused as exc:
                log.error("run %s: log refused (%s); the rest is sent at the end",
                          job.run_id, exc)
                return
            if done and job.log_sent >= job.spool.stat().st_size:
                return
            time.sleep(1.0 if not done else 2.0)
            if done and self.stopping.is_set():
                return

    def flush_logs(self, job: Job) -> None:
        """Everything spooled, to the server (the end of a run)."""
        while True:
            before = job.log_sent
            self.ship_logs(job)
            if job.log_sent >= job.spool.stat().st_size or job.log_sent == before:
                return

    def ship_logs(self, job: Job) -> None:
        """Send the spool from what the server has (job.log_sent) in chunks that end on
        whole characters. The server acknowledges a chunk it already has, so a retry is
        harmless."""
        with job.ship_lock:
            job.log_sent = self._ship_from(job, job.log_sent)

    def _ship_from(self, job: Job, sent: int) -> int:
        with job.spool_lock:
            with open(job.spool, "rb") as fh:
                fh.seek(sent)
                pending = fh.read(64 * CHUNK)  # a few MB at a time, however long the outage
        while pending:
            chunk = pending[:CHUNK]
            while chunk:
                try:
                    text = chunk.decode("utf-8")
                    break
                except UnicodeDecodeError:
                    chunk = chunk[:-1]  # a character cut in half: send it next time
            if not chunk:
                break
            try:
                answer = self.client.call("POST", f"/api/v1/runner/runs/{job.run_id}/logs",
                                          {"epoch": job.epoch, "offset": sent, "data": text})
            except Refused as exc:
                if exc.code == "log_gap":  # the server has less than we thought: resend
                    return int(exc.details.get("size", 0))
                raise
            sent = int(answer["size"]) if answer else sent + len(chunk)
            pending = pending[len(chunk):]
        return sent

    # -- the end --------------------------------------------------------------------------

    def finish(self, job: Job, rc: int) -> None:
        result_path = job.out / "lab" / "result.json"
        result = None
        if result_path.exists():
            try:
                result = json.loads(result_path.read_text())
            except ValueError:
                result = None
        status, reason, code = classify(rc, result, job.cancelled, job.spool)
        try:
            self._until_sent(lambda: self.flush_logs(job))
            if job.metrics:
                for i in range(0, len(job.metrics), 1000):
                    batch = job.metrics[i:i + 1000]
                    self._until_sent(lambda b=batch: self.client.call(
                        "POST", f"/api/v1/runner/runs/{job.run_id}/metrics",
                        {"epoch": job.epoch, "points": b}))
            if result is not None:
                self._until_sent(lambda: self.client.call(
                    "POST", f"/api/v1/runner/runs/{job.run_id}/result",
                    {"epoch": job.epoch, "result": result}))
            events = job.out / "lab" / "events.jsonl"
            if events.exists() and events.stat().st_size <= 8 * 1024 * 1024:
                self._until_sent(lambda: self.client.call(
                    "PUT", f"/api/v1/runner/runs/{job.run_id}/artifacts/events.jsonl"
                           f"?epoch={job.epoch}", raw=events.read_bytes(),
                    content_type="application/x-ndjson"))
            if status == "SUCCEEDED" and result is None:
                status, reason, code = "FAILED", "the lab wrote no result.json", "exit_code"
            self.report(job, status, reason, code, rc)
        except Stale:
            log.error("run %s: lease went stale before the end was reported", job.run_id)
        except Unreachable:
            log.error("run %s: stopped before the server answered; its output stays in %s",
                      job.run_id, job.out)
        except Refused as exc:
            log.error("run %s: the server refused the report: %s", job.run_id, exc)
            self.report(job, "FAILED", f"report refused: {exc}"[:900], "exit_code", rc)

    def report(self, job: Job, to: str, reason: str, code: str, rc, **extra) -> None:
        body = {"epoch": job.epoch, "to": to, "reason": reason[:1000], "reason_code": code,
                "exit_code": rc, **extra}
        try:
            self._until_sent(lambda: self.client.call(
                "POST", f"/api/v1/runner/runs/{job.run_id}/transition", body))
        except Stale:
            job.stale = True
            if job.proc is not None and job.proc.poll() is None:
                self.stop_job(job, grace_s=STALE_GRACE_S)

    def _until_sent(self, send):
        """Retry through outages (the run's results are on disk until then)."""
        delay = 1.0
        while True:
            try:
                return send()
            except Unreachable as exc:
                if self.stopping.is_set():
                    raise
                log.warning("server unreachable (%s); retrying in %.0fs", exc, delay)
                time.sleep(delay)
                delay = min(delay * 2, 30)


def classify(rc: int, result: dict | None, cancelled: bool, spool: Path) -> tuple[str, str, str]:
    """(status, reason, reason_code) from how the lab ended."""
    reason = ""
    if result and isinstance(result.get("reason"), dict):
        reason = str(result["reason"].get("message") or "")
    if rc == 0:
        return "SUCCEEDED", "", ""
    if cancelled or rc == 7:
        return "CANCELLED", "cancelled by the owner", "cancelled"
    tail = _tail(spool)
    if re.search(r"out of memory|OutOfMemoryError|CUDA error: out of memory", tail, re.I):
        return "FAILED", reason or "out of memory", "out_of_memory"
    if rc < 0:
        name = signal.Signals(-rc).name if -rc in signal.Signals._value2member_map_ else -rc
        return "FAILED", reason or f"the lab was killed by {name}", "signal"
    code = EXIT_REASONS.get(rc, "exit_code")
    if code == "exit_code" and re.search(r"timed? ?out|timeout", reason + tail, re.I):
        code = "collective_timeout"
    return "FAILED", reason or f"the lab exited with {rc}", code


def _tail(path: Path, size: int = 16 * 1024) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, path.stat().st_size - size))
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _number(value: str):
    try:
        return float(value) if any(c in value for c in ".eE") else int(value)
    except ValueError:
        return value[:100]


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _torchrun_pgid(out: Path) -> int | None:
    try:
        return int(json.loads((out / "pids.json").read_text())["torchrun_pgid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def main(server: str, token: str, work_dir: Path) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s runner %(message)s")
    agent = Agent(Client(server, token), work_dir)
    signal.signal(signal.SIGTERM, lambda _sig, _frame: agent.shutdown())
    signal.signal(signal.SIGINT, lambda _sig, _frame: agent.shutdown())
    agent.serve()
    log.info("runner stopped")
