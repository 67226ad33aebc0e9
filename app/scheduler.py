"""The scheduler process's entry: migrate, then run app/journal/scheduler.py's clock.

    python -m app.scheduler

`up` starts it so, and `commonplace scheduler` (systemd, compose) becomes it (exec): a
process that lives for days holds no click and no Flask (the app without the web,
`create_backend`), and Alembic runs in a child that takes it along when it ends
(tests/app/test_process_imports.py keeps it so).
"""

from __future__ import annotations

import subprocess
import sys

from app import create_backend
from app.journal.scheduler import main


def run() -> None:
    # Quietly: `up`, or the web's `db upgrade` (systemd, compose), has migrated already and
    # said so.
    if subprocess.run([sys.executable, "-m", "app.cli", "db", "upgrade"],
                      stdout=subprocess.DEVNULL).returncode:
        raise SystemExit(1)
    main(create_backend())


if __name__ == "__main__":
    run()
