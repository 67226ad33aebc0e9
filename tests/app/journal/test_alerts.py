"""A regression told to the owner's webhook: judged and delivered by the scheduler's job,
once, retried after a failure, never repeated after a restart. The receiver is a real HTTP
server on 127.0.0.1 that answers what the test tells it to."""

from __future__ import annotations

import datetime as dt
import http.server
import os
import subprocess
import sys
import threading
import time

import pytest

from app.config import from_environment
from app.journal import alerts
from app.journal.scheduler import Scheduler
from app.models import Judgement, utcnow
from tests.app.journal.test_trends import SMALL, collectives_result, finished
from tests.helpers import ROOT, count, free_port, load, stop_process


class Receiver:
    """A webhook receiver: records each POST, answers with the next of `answers` (200
    once they run out)."""

    def __init__(self, answers=()):
        self.answers, self.got, self.answered = list(answers), [], []
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers["Content-Length"])).decode()
                receiver.got.append((self.headers.get("Title"), body))
                code = receiver.answers.pop(0) if receiver.answers else 200
                receiver.answered.append(code)
                self.send_response(code)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/cpl-alerts"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


@pytest.fixture
def receiver():
    made = []

    def make(answers=()):
        made.append(Receiver(answers))
        return made[-1]

    yield make
    for r in made:
        r.close()


def regressed(db) -> int:
    finished(db, "collectives", SMALL, collectives_result(40e9))
    return finished(db, "collectives", SMALL, collectives_result(30e9))


def test_a_regression_is_delivered_once_after_a_failed_try(make_app, receiver):
    hook = receiver([500])
    app = make_app(WEBHOOK_URL=hook.url)
    db = app.extensions["db"]
    run_id = regressed(db)
    now = utcnow()
    Scheduler(app).alerts(now)
    assert len(hook.got) == 1  # answered 500
    alert = load(db, Judgement, run_id)
    assert alert.sent_at is None and alert.attempts == 1 and alert.last_error == "HTTP 500"
    assert alert.next_at == now + dt.timedelta(seconds=alerts.BACKOFF_S)

    Scheduler(app).alerts(now + dt.timedelta(seconds=1))  # not due yet
    assert len(hook.got) == 1
    Scheduler(app).alerts(now + dt.timedelta(seconds=alerts.BACKOFF_S))
    assert len(hook.got) == 2 and load(db, Judgement, run_id).sent_at is not None
    # a restarted scheduler, later: nothing is sent again
    Scheduler(make_app(WEBHOOK_URL=hook.url)).alerts(now + dt.timedelta(hours=5))
    assert len(hook.got) == 2
    assert count(db, Judgement, Judgement.next_at.is_not(None)) == 1
    title, body = hook.got[-1]
    assert title == f"Regression in run {run_id} (collectives)"
    assert body.startswith(f"Run {run_id} · Collective bandwidth sweep: 2 numbers beyond noise")
    assert "all_reduce at 65.5 kB: 30 GB/s, −25% vs " in body


def test_an_unreachable_webhook_is_retried_with_backoff_then_given_up(make_app, receiver):
    hook = receiver()
    url = hook.url
    hook.close()  # nobody listens there now
    app = make_app(WEBHOOK_URL=url)
    db = app.extensions["db"]
    run_id = regressed(db)
    now, waits = utcnow(), []
    for _ in range(alerts.MAX_ATTEMPTS):
        Scheduler(app).alerts(now)
        alert = load(db, Judgement, run_id)
        waits.append((alert.next_at - now).total_seconds())
        now = alert.next_at
    assert waits[:3] == [alerts.BACKOFF_S, 2 * alerts.BACKOFF_S, 4 * alerts.BACKOFF_S]
    alert = load(db, Judgement, run_id)
    assert alert.failed_at is not None and alert.sent_at is None
    assert alert.attempts == alerts.MAX_ATTEMPTS


def test_without_a_webhook_runs_are_judged_and_nothing_is_queued(app):
    db = app.extensions["db"]
    run_id = regressed(db)
    Scheduler(app).alerts()
    judged = load(db, Judgement, run_id)
    assert judged.regressions == 2 and judged.next_at is None  # nothing to send it to


def test_a_run_that_kept_its_numbers_sends_nothing(make_app, receiver):
    hook = receiver()
    app = make_app(WEBHOOK_URL=hook.url)
    db = app.extensions["db"]
    finished(db, "collectives", SMALL, collectives_result(40e9))
    finished(db, "collectives", SMALL, collectives_result(40.2e9))
    Scheduler(app).alerts()
    assert hook.got == [] and count(db, Judgement) == 2
    assert count(db, Judgement, Judgement.next_at.is_not(None)) == 0


@pytest.mark.parametrize("url", ["ntfy.sh/topic", "ftp://x/y", "http://", "http:// x"])
def test_a_webhook_that_is_not_an_http_url_stops_the_start(url):
    with pytest.raises(SystemExit, match="COMMONPLACE_WEBHOOK_URL"):
        from_environment({"COMMONPLACE_WEBHOOK_URL": url, "COMMONPLACE_TIMEZONE": "UTC"})


def test_runs_finished_long_before_they_are_judged_send_nothing(make_app, receiver):
    hook = receiver()
    app = make_app(WEBHOOK_URL=hook.url)
    db = app.extensions["db"]
    run_id = regressed(db)
    Scheduler(app).alerts(utcnow() + alerts.JUDGE_WINDOW + dt.timedelta(minutes=1))
    assert hook.got == [] and load(db, Judgement, run_id) is None


def test_the_scheduler_process_delivers_each_regression_once_across_a_restart(
        make_app, receiver, data_dir):
    """The real `commonplace scheduler` with COMMONPLACE_WEBHOOK_URL: it POSTs the
    regression; restarted, it sends the next run's and not the first's again."""
    hook = receiver()
    db = make_app().extensions["db"]
    first = regressed(db)
    env = {**os.environ, "COMMONPLACE_DATA_DIR": str(data_dir), "COMMONPLACE_AUTH": "dev",
           "COMMONPLACE_TIMEZONE": "UTC", "COMMONPLACE_WEBHOOK_URL": hook.url,
           "COMMONPLACE_BIND": f"127.0.0.1:{free_port()}"}  # no web there: none is needed
    env.pop("COMMONPLACE_DATABASE_URL", None)
    log = (data_dir / "scheduler.log").open("w")

    def scheduler() -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "app.cli", "scheduler"], cwd=ROOT,
                                env=env, stdout=log, stderr=subprocess.STDOUT)

    def delivered(n: int) -> None:
        deadline = time.monotonic() + 60
        while len(hook.got) < n and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(hook.got) >= n, (data_dir / "scheduler.log").read_text()[-3000:]

    proc = scheduler()
    try:
        delivered(1)
        stop_process(proc)
        second = finished(db, "collectives", SMALL, collectives_result(20e9))
        proc = scheduler()
        delivered(2)
    finally:
        stop_process(proc)
        log.close()
    assert [title for title, _ in hook.got] == [f"Regression in run {first} (collectives)",
                                                f"Regression in run {second} (collectives)"]
