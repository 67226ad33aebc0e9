"""The agent: register, long-poll for a lease, run the leased experiment with the lab,
and report it - heartbeats, the log in sequenced chunks, metrics, the result, the end.

How a run ended, in the journal's words, is jobs/runner/outcome.py.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from base.contract import (
    EVENTS_FILE,
    parse_progress,
    torchrun_pgid,
)
from base.statuses import CANCELLED, FAILED, RUNNING, SUCCEEDED
from jobs.runner import node
from jobs.runner.client import VERSION, Busy, Client, Refused, Stale, Unreachable
from jobs.runner.host import die_with_parent, host_labels, signal_group
from jobs.runner.installed import Experiments
from jobs.runner.outcome import outcome, read_result
from jobs.runner.waiting import PATIENCE_S, Silence

log = logging.getLogger("commonplace.runner")
REPO_ROOT = Path(__file__).resolve().parents[2]
CHUNK = 60 * 1024  # below the server's 64 KiB cap
STALE_GRACE_S = 2.0  # a stale job stops at once, but torchrun gets a moment to end its ranks

@dataclass
class Job:
    """One leased run being executed."""

    run_id: int
    epoch: int
    experiment: str
    params: dict
    out: Path
    gang: dict | None = None  # this host's share of a run that spans hosts (gang.py)
    proc: subprocess.Popen | None = None
    step: int = 0
    total: int = 0
    progress: dict = field(default_factory=dict)
    said: int = 0  # progress lines read so far (a new phase is news, even at the same step)
    metrics: list = field(default_factory=list)
    stale: bool = False
    cancelled: bool = False
    log_sent: int = 0  # bytes of the spool the server has acknowledged
    spool_lock: threading.Lock = field(default_factory=threading.Lock)
    ship_lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def spool(self) -> Path:
        return self.out / "agent.log"

    @property
    def lab_dir(self) -> Path:
        """The lab's own output directory (result.json, events.jsonl, pids.json ...)."""
        return self.out / "lab"


class Agent:
    def __init__(self, client: Client, work_dir: Path, *, labels: dict | None = None,
                 cancel_grace_s: float = 10.0, advertise: str = "127.0.0.1",
                 rdzv_port: int = 0, poll_wait: int = 10, patience_s: float = PATIENCE_S):
        self.client = client
        # A server that does not answer is waited for quietly for patience_s (waiting.py).
        self.silence = Silence(client.server, log, patience_s)
        self.rdzv = node.Reservation(advertise, rdzv_port)  # this host as a gang node
        self.poll_wait = poll_wait  # a stop (Ctrl-C) is never more than this away
        self.work_dir = work_dir
        self.labels = labels if labels is not None else host_labels()
        self.cancel_grace_s = cancel_grace_s
        self.heartbeat_s = 15.0
        self.stopping = threading.Event()
        self.job: Job | None = None
        self.experiments = Experiments()  # the owner's own, reported when registering

    # -- the loop -------------------------------------------------------------------------

    def serve(self) -> None:
        self.register()
        while not self.stopping.is_set():
            if self.experiments.changed():  # a file added, edited or removed: say so
                self.register()
            try:
                answer = self.client.call("POST", "/api/v1/runner/lease", {
                    "wait": self.poll_wait,
                    "node": self.rdzv.offer()})
            except Busy as exc:  # enough runners are polling right now: ask again later
                log.info("the server is busy; polling again in %.0fs", exc.retry_after)
                self.stopping.wait(exc.retry_after)
                continue
            except Unreachable as exc:
                self.stopping.wait(self.silence.failed(str(exc)))
                continue
            except Refused as exc:
                log.error("lease refused: %s; registering again", exc)
                self.stopping.wait(5)
                self.register()
                continue
            self.silence.answered()
            if answer and answer.get("run"):
                self.heartbeat_s = float(answer.get("heartbeat_s", self.heartbeat_s))
                if self.stopping.is_set():  # leased while we were being stopped: hand back
                    spec = answer["run"]
                    self.report(Job(spec["id"], spec["epoch"], spec["experiment"],
                                    spec["params"], self.work_dir), CANCELLED,
                                "the runner shut down before starting it", "cancelled", None)
                    return
                self.execute(answer["run"])

    def register(self) -> None:
        refused_wait = 1.0
        while not self.stopping.is_set():
            try:
                answer = self.client.call("POST", "/api/v1/runner/register", {
                    "labels": self.labels, "version": VERSION,
                    "experiments": self.experiments.read()})
            except Unreachable as exc:  # not listening yet, or gone: wait, quietly at first
                self.stopping.wait(self.silence.failed(str(exc)))
                continue
            except (Refused, Stale) as exc:  # it answered no: a wrong token, an old runner
                self.silence.answered()
                log.warning("the server at %s refused this runner (%s); trying again in %.0f s",
                            self.client.server, exc, refused_wait)
                self.stopping.wait(refused_wait)
                refused_wait = min(refused_wait * 2, 30)
                continue
            self.silence.answered()
            self.heartbeat_s = float(answer.get("heartbeat_s", 15))
            log.info("registered as %s (heartbeat %.1fs)", answer["runner"], self.heartbeat_s)
            return

    # -- one run --------------------------------------------------------------------------

    def execute(self, spec: dict) -> None:
        job = Job(spec["id"], spec["epoch"], spec["experiment"], spec["params"],
                  self.work_dir / f"run-{spec['id']}-epoch-{spec['epoch']}", spec.get("gang"))
        self.job = job
        job.out.mkdir(parents=True, exist_ok=True)
        job.spool.touch()
        log.info("run %s: %s %s", job.run_id, job.experiment, json.dumps(job.params))
        argv = [sys.executable, "-m", "jobs.lab", "run", job.experiment,
                "--params", json.dumps(job.params), "--out", str(job.lab_dir),
                *node.lab_args(job.gang)]
        handed = self.rdzv.handed(job.gang)
        try:
            job.proc = subprocess.Popen(
                argv, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                start_new_session=True, preexec_fn=die_with_parent,
                pass_fds=handed.get("pass_fds", ()),
                env={**os.environ, "PYTHONUNBUFFERED": "1", **handed.get("env", {})})
        except OSError as exc:
            self.report(job, FAILED, f"could not start the lab: {exc}", "launch_failed", None)
            return
        self.report(job, RUNNING, "", "", None, environment=self.labels)
        reader, _, ship = threads = [threading.Thread(target=f, args=(job,), daemon=True) for f
                                     in (self._read_output, self._heartbeat_loop,
                                         self._ship_logs_loop)]
        for thread in threads:
            thread.start()
        rc = job.proc.wait()
        if handed:
            self.rdzv.renew()
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
            progress = parse_progress(line)
            if progress:
                job.step, job.total, job.progress = progress
                job.said += 1
                rate = job.progress.get("tokens_per_s")
                if isinstance(rate, int | float):
                    job.metrics.append({"key": "tokens_per_s", "step": job.step,
                                        "value": float(rate)})

    def _heartbeat_loop(self, job: Job) -> None:
        """Renew the lease every heartbeat_s, and sooner (at most once a second) when there
        is new progress to show: the run page is live without a second channel."""
        last_sent, last_said = 0.0, -1
        while job.proc.poll() is None:
            now = time.monotonic()
            if now - last_sent < self.heartbeat_s and job.said == last_said:
                time.sleep(1.0)
                continue
            last_sent, last_said = now, job.said
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
        signal_group(job.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while job.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        for pgid in (job.proc.pid, torchrun_pgid(job.lab_dir)):
            if pgid:
                signal_group(pgid, signal.SIGKILL)

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
            chunk = node.whole_lines(pending[:CHUNK], job.gang, job.proc.poll() is None, CHUNK)
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
        result = read_result(job.lab_dir)
        status, reason, code = outcome(rc, result, job.cancelled)
        try:
            self._until_sent(lambda: self.flush_logs(job))
            for i in range(0, len(job.metrics), 1000):
                batch = job.metrics[i:i + 1000]
                self._until_sent(lambda b=batch: self.client.call(
                    "POST", f"/api/v1/runner/runs/{job.run_id}/metrics",
                    {"epoch": job.epoch, "points": b}))
            if result is not None and node.node_rank(job.gang) == 0:
                self._until_sent(lambda: self.client.call(
                    "POST", f"/api/v1/runner/runs/{job.run_id}/result",
                    {"epoch": job.epoch, "result": result}))
            events = job.lab_dir / EVENTS_FILE
            if events.exists() and events.stat().st_size <= 8 * 1024 * 1024:
                self._until_sent(lambda: self.client.call(
                    "PUT", f"/api/v1/runner/runs/{job.run_id}/artifacts/"
                           f"{node.events_name(job.gang)}?epoch={job.epoch}",
                    raw=events.read_bytes(),
                    content_type="application/x-ndjson"))
            if status == SUCCEEDED and result is None and not node.node_rank(job.gang):
                status, reason, code = FAILED, "the lab wrote no result.json", "exit_code"
            self.report(job, status, reason, code, rc)
        except Stale:
            log.error("run %s: lease went stale before the end was reported", job.run_id)
        except Unreachable:
            log.error("run %s: stopped before the server answered; its output stays in %s",
                      job.run_id, job.out)
        except Refused as exc:
            log.error("run %s: the server refused the report: %s", job.run_id, exc)
            self.report(job, FAILED, f"report refused: {exc}"[:900], "exit_code", rc)

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


def main(server: str, token: str, work_dir: Path, advertise: str = "127.0.0.1",
         rdzv_port: int = 0, poll_wait: int = 10) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s runner %(message)s")
    agent = Agent(Client(server, token), work_dir, advertise=advertise, rdzv_port=rdzv_port,
                  poll_wait=poll_wait)
    signal.signal(signal.SIGTERM, lambda _sig, _frame: agent.shutdown())
    signal.signal(signal.SIGINT, lambda _sig, _frame: agent.shutdown())
    agent.serve()
    log.info("runner stopped")
