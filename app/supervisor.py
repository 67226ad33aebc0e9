"""`commonplace up`'s children: start the web, the scheduler and a local runner, wait while
they run, and stop all of them at once when one ends or we are told to (Ctrl-C, SIGTERM).

    python -m app.supervisor SERVER ADDRESS [ADDRESS …]

`up` prepares the notebook (migrations, this week's letter, the runner's token) and then
becomes this (exec): a process that only starts and watches holds the interpreter and the
standard library, not the app it loaded to prepare (tests/app/test_process_imports.py keeps
it so). SERVER is the URL the runner reaches the web at; the ADDRESSes are the web's.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping

from app import ROOT

# How long the web and the scheduler get to stop after Ctrl-C before they are killed: they
# hold nothing that a kill loses (SQLite rolls back an unfinished write). The runner gets
# longer: it may be cancelling a run, which it reports before it exits.
QUICK_STOP_S, RUNNER_STOP_S = 1.5, 15.0
# The local runner's token: from `up` to the runner alone, in the environment (a command
# line is readable by every user of the machine).
RUNNER_TOKEN = "COMMONPLACE_RUNNER_TOKEN"
# The scheduler by its own entry, not `commonplace scheduler`: a process that runs for days
# need not hold click.
SCHEDULER_COMMAND = [sys.executable, "-m", "app.scheduler"]
USAGE = "usage: python -m app.supervisor SERVER ADDRESS [ADDRESS …]"


def command(server: str, addresses: list[str]) -> list[str]:
    """What `up` execs once the notebook is ready."""
    return [sys.executable, "-m", "app.supervisor", server, *addresses]


# The web's interpreter without docstrings (and asserts, which the served code does not
# rely on): the libraries' docstrings are megabytes that every worker holds and no page
# reads (docs/PERFORMANCE.md, *A small host*).
WEB_PYTHON = [sys.executable, "-OO"]
# glibc's per-thread caches of freed small blocks (tcache) off in the web: each of a
# worker's threads kept its own, and a block parked there is in use as far as malloc_trim
# can tell, so a worker at rest could not give back the pages they were scattered over
# (docs/PERFORMANCE.md, *A web worker at 100k entries*). Read by glibc as the process
# starts, so it travels in the environment; ignored off glibc.
WEB_MALLOC = "glibc.malloc.tcache_count=0"


def web_environment(env: Mapping[str, str]) -> dict[str, str]:
    """The environment the web's gunicorn starts with: env, and WEB_MALLOC among any
    tunables it sets already."""
    tunables = env.get("GLIBC_TUNABLES")
    return {**env, "GLIBC_TUNABLES": f"{tunables}:{WEB_MALLOC}" if tunables else WEB_MALLOC}


def gunicorn_argv(addresses: list[str]) -> list[str]:
    # Workers, threads, timeouts and logging live in gunicorn.conf.py (the same file Docker
    # and systemd use); the command line only names the addresses.
    binds = [arg for address in addresses for arg in ("--bind", address)]
    return [*WEB_PYTHON, "-m", "gunicorn", "--config", str(ROOT / "gunicorn.conf.py"),
            *binds, "app:create_served_app()"]


def start(server: str, addresses: list[str]) -> list[subprocess.Popen]:
    """The web, the scheduler and the runner, the runner last."""
    me = [sys.executable, "-m", "app.cli"]
    quiet = {key: value for key, value in os.environ.items() if key != RUNNER_TOKEN}
    # The web and the scheduler each lead a process group of their own, so that a stop
    # reaches their workers too; the runner stays in ours and gets Ctrl-C as it is.
    return [
        subprocess.Popen(gunicorn_argv(addresses), env=web_environment(quiet),
                         start_new_session=True),
        subprocess.Popen(SCHEDULER_COMMAND, env=quiet, start_new_session=True),
        subprocess.Popen([*me, "runner", "--server", server]),
    ]


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


def main(argv: list[str]) -> None:
    if len(argv) < 2:
        raise SystemExit(USAGE)
    server, *addresses = argv
    supervise(start(server, addresses))


if __name__ == "__main__":
    main(sys.argv[1:])
