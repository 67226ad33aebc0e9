"""The scheduler process's entry, and its children's.

    python -m app.scheduler                          the scheduler: migrate, then the clock
    python -m app.scheduler JOB [SCHEDULE_ID | --amnesty]   one job's work (the clock's child)

`up` starts the first, and `commonplace scheduler` (systemd, compose) becomes it (exec). A
process that lives for days holds no click, no Flask and no SQLAlchemy: Alembic runs in a
child, and so does each job's work with the ORM (app/journal/scheduler.py); each child
takes what it loaded along when it ends (tests/app/test_process_imports.py keeps it so).
"""

from __future__ import annotations

import logging
import signal
import subprocess
import sys

from app.config import from_environment
from app.journal import clock

PR_SET_PDEATHSIG = 1  # prctl(2)


def run(argv: list[str]) -> None:
    if argv:
        work(argv)
    # Quietly: `up`, or the web's `db upgrade` (systemd, compose), has migrated already and
    # said so.
    if subprocess.run([sys.executable, "-m", "app.cli", "db", "upgrade"],
                      stdout=subprocess.DEVNULL).returncode:
        raise SystemExit(1)
    clock.main(from_environment())


def work(argv: list[str]) -> None:
    end_with_the_clock()
    # Here, not above: the clock's own process never loads the ORM.
    from app import create_backend
    from app.journal import scheduler

    logging.basicConfig(level=logging.INFO, format="%(asctime)s scheduler %(message)s")
    if not scheduler.valid(argv):  # before the backend, which makes the data folder
        raise SystemExit(scheduler.USAGE)
    raise SystemExit(scheduler.run(create_backend(), argv[0], argv[1:]))


def end_with_the_clock() -> None:
    """On Linux, a SIGTERM to this child when the clock that started it ends, however it
    ends (a SIGKILL too), as the work ended when it ran inside the clock: a job of a dead
    clock never overlaps the same job of its successor. (PR_SET_PDEATHSIG watches the
    thread that started us: the clock's job thread, which waits for us.)"""
    if sys.platform == "linux":
        import ctypes

        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


if __name__ == "__main__":
    run(sys.argv[1:])
