"""`commonplace up` as a new user meets it: a busy port is named before anything starts,
each notebook keeps gunicorn's control socket in its own data folder, and Ctrl-C stops
every process it started without waiting out a runner's long poll."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from app.port_holder import port_problem
from tests.helpers import ROOT, free_port, stop_process, wait_for_http

BOUND = 60  # seconds any wait may take before the test gives up


def up_env(data_dir, port: int, **extra: str) -> dict[str, str]:
    env = {**os.environ, "COMMONPLACE_DATA_DIR": str(data_dir),
           "COMMONPLACE_BIND": f"127.0.0.1:{port}", "COMMONPLACE_AUTH": "dev",
           "COMMONPLACE_TIMEZONE": "UTC", "COMMONPLACE_WEB_WORKERS": "1", **extra}
    env.pop("COMMONPLACE_DATABASE_URL", None)
    return env


def test_up_on_a_busy_port_says_what_holds_it_and_starts_nothing(data_dir):
    with socket.create_server(("127.0.0.1", 0)) as holder:
        port = holder.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "app.cli", "up"], cwd=ROOT,
                              env=up_env(data_dir, port), capture_output=True, text=True,
                              timeout=BOUND)
    assert done.returncode != 0
    assert f"port {port} is already in use, by process {os.getpid()}" in done.stderr
    assert "running at" not in done.stdout
    assert not (data_dir / "gunicorn.ctl").exists()


def test_up_on_an_address_without_a_usable_port_says_so_and_starts_nothing(data_dir):
    done = subprocess.run([sys.executable, "-m", "app.cli", "up"], cwd=ROOT,
                          env={**up_env(data_dir, 0), "COMMONPLACE_BIND": "127.0.0.1:99999"},
                          capture_output=True, text=True, timeout=BOUND)
    assert done.returncode == 2, done.stderr
    assert "COMMONPLACE_BIND=127.0.0.1:99999 does not end in a port number from 1 to 65535" \
        in done.stderr and "Traceback" not in done.stderr
    assert "running at" not in done.stdout and not (data_dir / "gunicorn.ctl").exists()
    # without a port, gunicorn would have taken 8000, whoever held it
    for bind in ("localhost", "127.0.0.1:", "[::1]", "127.0.0.1:0", "127.0.0.1:８０００"):
        assert "does not end in a port number" in port_problem(bind), bind


def processes_in_group(pgid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.getpgid(int(entry)) == pgid:
                    found.append(int(entry))
            except OSError:
                pass
    return found


def test_ctrl_c_stops_everything_without_waiting_out_a_long_poll(data_dir):
    """The runner's long poll waits 10 s; Ctrl-C (SIGINT to the terminal's process group)
    ends `up`, gunicorn with its workers, the scheduler and the runner well before it."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", "up"], cwd=ROOT,
                            env=up_env(data_dir, port, COMMONPLACE_RUNNER_POLL_WAIT="10"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        wait_for_http(f"http://127.0.0.1:{port}/healthz", proc=proc)
        # this notebook's own control socket, which gunicorn's arbiter opens beside its
        # workers: on a loaded host a worker may answer first
        deadline = time.monotonic() + 10
        while not (data_dir / "gunicorn.ctl").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (data_dir / "gunicorn.ctl").exists()
        # `up` became the supervisor, which maps no library from outside the standard one
        # (what it imports: tests/app/test_process_imports.py)
        argv = Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0")
        assert argv[1:3] == [b"-m", b"app.supervisor"]
        assert "site-packages" not in Path(f"/proc/{proc.pid}/maps").read_text()
        runner = [pid for pid in processes_in_group(proc.pid) if pid != proc.pid]
        time.sleep(2)  # the runner has registered and is inside a long poll
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=8)  # under the long poll's 10 s (plus the slack of a busy box)
        assert runner and not processes_in_group(proc.pid)
        with socket.socket() as probe:  # gunicorn, in a group of its own, is gone too
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(("127.0.0.1", port))
    finally:
        stop_process(proc)
