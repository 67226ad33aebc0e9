"""The experiment journal through the real processes: gunicorn (`commonplace web`), the
scheduler process, runner agents, and the lab under torchrun on CPU with gloo.

Short lease settings (TTL 4 s, reaper every 1 s) make the fault drills quick; the code
paths are the production ones. One web and one scheduler serve the whole module (starting
them costs seconds of CPU a test); each test starts runners of its own, reads only the runs
it made, and hands the server back as it found it (`Journal.tidy`): its runners ended by
PID (and process group), anything it left queued cancelled, the web and the scheduler up
again if it stopped them. Every wait has a deadline.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from tests.helpers import stop_process
from tests.journal_harness import (
    QUICK,
    REAPER,
    SLEEPER,
    TTL,
    Journal,
    api,
    group_alive,
    processes_of,
    wait_until,
)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    journal = Journal(tmp_path_factory.mktemp("journal"))
    try:
        journal.start()
        yield journal
    finally:
        journal.stop()


@pytest.fixture
def journal(server):
    """The module's server, tidied after the test whatever it did (`Journal.tidy`)."""
    since = len(server.procs)
    try:
        yield server
    finally:
        server.tidy(since)


def test_run_from_the_api_succeeds_and_lands_in_the_letter_and_feed(journal):
    journal.runner("local")
    started = time.monotonic()
    run_id = journal.create("data_parallel", steps=2, warmup=1)
    first_step = wait_until("the first progress", lambda: journal.run(run_id)["progress"]
                            ["step"] > 0 or journal.run(run_id)["status"] == "SUCCEEDED", 120)
    assert first_step
    print(f"\n[figure] Run pressed → first training step reported: "
          f"{time.monotonic() - started:.1f}s")
    run = journal.wait_status(run_id, ["SUCCEEDED", "FAILED"])
    assert run["status"] == "SUCCEEDED", run["reason"]
    assert run["result"]["schema_version"] == 1 and run["environment"]["backend"] == "gloo"
    assert [e["to"] for e in run["events"]] == ["QUEUED", "LEASED", "RUNNING", "SUCCEEDED"]
    logs = api(journal.base, f"/api/v1/runs/{run_id}/logs?offset=0")[1]
    assert "progress step=" in logs["data"] and logs["done"]
    assert any(a["name"] == "events.jsonl" for a in run["artifacts"])
    letter_id = wait_until("the card in the letter",
                           lambda: journal.run(run_id)["letter_entry_id"], 30)
    letter = api(journal.base, f"/api/v1/entries/{letter_id}")[1]
    assert f"```run\nid: {run_id}\n```" in letter["body"]
    assert f'href="/runs/{run_id}"' in letter["html"] and "run-succeeded" in letter["html"]
    status, feed = api(journal.base, "/feed.atom")
    assert status == 200 and f"/runs/{run_id}".encode() in feed and b"run-card" in feed


def test_killed_runner_is_lost_within_ttl_and_a_new_runner_takes_new_work(journal):
    runner = journal.runner("doomed", plugin="sleep_all.py")
    run_id = journal.create("data_parallel", **SLEEPER)
    journal.wait_status(run_id, "RUNNING", 60)
    pids = journal.pids("doomed", run_id)
    os.kill(runner.pid, signal.SIGKILL)
    killed = time.monotonic()
    lost = journal.wait_status(run_id, ["LOST"], TTL + REAPER + 20)
    detected = time.monotonic() - killed
    print(f"\n[figure] runner killed → run LOST after {detected:.1f}s "
          f"(TTL {TTL}s + reaper {REAPER}s)")
    assert lost["reason_code"] == "lease_expired" and "doomed" in lost["reason"]
    # the job died with its runner: no orphaned launcher, torchrun or rank
    wait_until("the orphaned job to end", lambda: not processes_of(pids["out"]), 20)
    journal.runner("fresh")
    new_id = journal.create("gemm_roofline")
    done = journal.wait_status(new_id, ["SUCCEEDED", "FAILED"])
    assert done["status"] == "SUCCEEDED" and done["runner"] == "fresh"
    assert journal.run(run_id)["status"] == "LOST"  # never silently re-run


def test_a_web_outage_does_not_lose_a_healthy_run_but_a_dead_runner_is_still_lost(journal):
    steady = journal.runner("steady", plugin="slow_steps.py")
    run_id = journal.create("data_parallel", strategies=["dp_naive"], **QUICK)
    journal.wait_status(run_id, "RUNNING", 60)
    wait_until("the scheduler to have seen the web up", lambda: "answers" in (
        journal.data_dir / "scheduler.log").read_text(), 30)
    stop_process(journal.web)  # gunicorn alone goes down, mid-run, for two lease lifetimes
    down = time.monotonic()
    while time.monotonic() - down < 2 * TTL + REAPER:
        assert journal.status_in_db(run_id) == "RUNNING"  # the reaper waits for the web
        time.sleep(0.5)
    journal.start_web()
    done = journal.wait_status(run_id, ["SUCCEEDED", "FAILED", "LOST"], 120)
    assert done["status"] == "SUCCEEDED", done["reason"]
    assert "LOST" not in [e["to"] for e in done["events"]]
    assert wait_until("the card in the letter",
                      lambda: journal.run(run_id)["letter_entry_id"], 30)
    # and with the web up, a runner that really dies is still LOST within TTL + reaper
    second = journal.create("data_parallel", strategies=["dp_naive"], **QUICK)
    journal.wait_status(second, "RUNNING", 60)
    os.kill(steady.pid, signal.SIGKILL)
    killed = time.monotonic()
    journal.wait_status(second, ["LOST"], TTL + REAPER + 20)
    print(f"\n[figure] web down {2 * TTL + REAPER}s mid-run → run SUCCEEDED; runner killed "
          f"afterwards → LOST after {time.monotonic() - killed:.1f}s (TTL {TTL}s + reaper "
          f"{REAPER}s)")


def test_a_stale_runner_gets_409_and_stops_its_job(journal):
    runner = journal.runner("sleepy", plugin="sleep_all.py")
    run_id = journal.create("data_parallel", **SLEEPER)
    journal.wait_status(run_id, "RUNNING", 60)
    pids = journal.pids("sleepy", run_id)
    os.kill(runner.pid, signal.SIGSTOP)  # the agent freezes (a stuck host), its job runs on
    try:
        journal.wait_status(run_id, ["LOST"], TTL + REAPER + 20)
    finally:
        os.kill(runner.pid, signal.SIGCONT)
    # its next heartbeat carries the old epoch: 409, and it kills the job itself, ranks too
    wait_until("the stale job to be killed", lambda: not processes_of(pids["out"]), 30)
    assert runner.poll() is None  # the agent lives on, ready for new work
    assert journal.run(run_id)["status"] == "LOST"
    log = (journal.data_dir / "runner-sleepy.log").read_text()
    assert "stale" in log


def test_two_runners_on_one_queue_take_each_run_once(journal):
    journal.runner("a")
    journal.runner("b")
    ids = [journal.create("gemm_roofline") for _ in range(4)]
    done = [journal.wait_status(i, ["SUCCEEDED", "FAILED", "LOST"], 180) for i in ids]
    assert [d["status"] for d in done] == ["SUCCEEDED"] * 4
    for d in done:
        assert [e["to"] for e in d["events"]].count("LEASED") == 1


def test_cancel_ends_the_whole_process_group(journal):
    journal.runner("c", plugin="sleep_all.py")
    run_id = journal.create("data_parallel", **SLEEPER)
    journal.wait_status(run_id, "RUNNING", 60)
    pids = journal.pids("c", run_id)
    assert group_alive(pids["torchrun_pgid"])
    status, _ = api(journal.base, f"/api/v1/runs/{run_id}/cancel", {}, "POST")
    assert status == 200
    run = journal.wait_status(run_id, ["CANCELLED", "FAILED", "LOST"], TTL + 30)
    assert run["status"] == "CANCELLED" and run["reason_code"] == "cancelled"
    wait_until("every process of the run to end", lambda: not processes_of(pids["out"]), 10)


def test_a_failed_correctness_gate_fails_the_run_with_that_reason(journal):
    journal.runner("broken", plugin="broken_dp.py")
    run_id = journal.create("data_parallel", **QUICK, strategies=["dp_naive"])
    run = journal.wait_status(run_id, ["SUCCEEDED", "FAILED", "LOST"], 120)
    assert run["status"] == "FAILED" and run["reason_code"] == "correctness"
    assert "blocks.0.mlp.fc.weight" in run["reason"]
    wait_until("the failure card", lambda: journal.run(run_id)["letter_entry_id"], 30)


def test_scheduler_restart_keeps_schedules_and_fires_a_missed_fire_once(journal):
    now = time.gmtime(time.time() - 300)  # a daily fire five minutes ago, while "down"
    cron = f"{now.tm_min} {now.tm_hour} * * *"
    status, s = api(journal.base, "/api/v1/schedules", {
        "experiment": "gemm_roofline", "cron": cron, "timezone": "UTC",
        "misfire_grace_s": 3600})
    assert status == 201
    status, late = api(journal.base, "/api/v1/schedules", {
        "experiment": "gemm_roofline", "cron": cron, "timezone": "UTC", "misfire_grace_s": 60})
    os.kill(journal.scheduler.pid, signal.SIGKILL)
    journal.scheduler.wait(timeout=10)
    # both schedules existed since yesterday: today's fire was missed while we were down
    import sqlite3

    with sqlite3.connect(journal.data_dir / "commonplace.db") as conn:
        conn.execute("UPDATE schedule SET created_at = datetime('now', '-1 day')")
    for _ in range(2):  # restart twice: the fire happens once, not twice
        journal.scheduler = journal.spawn("scheduler2", ["scheduler"])
        wait_until("the catch-up fire", lambda: api(
            journal.base, f"/api/v1/runs?schedule={s['id']}")[1]["runs"], 30)
        time.sleep(2)
        os.kill(journal.scheduler.pid, signal.SIGKILL)
        journal.scheduler.wait(timeout=10)
    fired = api(journal.base, f"/api/v1/runs?schedule={s['id']}")[1]["runs"]
    assert len(fired) == 1 and fired[0]["trigger"] == "schedule"
    assert fired[0]["scheduled_for"].startswith(time.strftime("%Y-%m-%dT%H:%M", now))
    # the other schedule's fire is beyond its one-minute grace: dropped, not run late
    assert api(journal.base, f"/api/v1/runs?schedule={late['id']}")[1]["runs"] == []
    listed = api(journal.base, "/api/v1/schedules")[1]["schedules"]
    assert [x["id"] for x in listed] == [s["id"], late["id"]]
