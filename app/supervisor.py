"""`commonplace up`'s children: wait while they run, and stop all of them at once when one
ends or we are told to (Ctrl-C, SIGTERM)."""

from __future__ import annotations

import os
import signal
import subprocess
import time

# How long the web and the scheduler get to stop after Ctrl-C before they are killed: they
# hold nothing that a kill loses (SQLite rolls back an unfinished write). The runner gets
# longer: it may be cancelling a run, which it reports before it exits.
QUICK_STOP_S, RUNNER_STOP_S = 1.5, 15.0


def supervise(children: list[subprocess.Popen]) -> None:
    """Wait until a child exits or we are told to stop; then stop every child we started."""
    stopping = False

    def _stop(_sig, _frame):
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    try:
        while not stopping and all(child.poll() is None for child in children):
            time.sleep(0.1)
    finally:
        for child in children:
            if child.poll() is None:
                child.send_signal(signal.SIGINT)  # a quick stop, as a terminal's Ctrl-C
        started = time.monotonic()
        for child in children:
            grace = RUNNER_STOP_S if child is children[-1] else QUICK_STOP_S
            try:
                child.wait(timeout=max(0.05, started + grace - time.monotonic()))
            except subprocess.TimeoutExpired:
                _kill(child, whole_group=child is not children[-1])
    failed = [c for c in children if c.returncode not in (0, -signal.SIGTERM, -signal.SIGINT,
                                                          -signal.SIGKILL)]
    if failed and not stopping:
        raise SystemExit(1)


def _kill(child: subprocess.Popen, whole_group: bool) -> None:
    try:
        if whole_group:  # its own group (start_new_session): its workers with it
            os.killpg(child.pid, signal.SIGKILL)
        else:
            child.kill()
    except ProcessLookupError:
        pass
    child.wait()
