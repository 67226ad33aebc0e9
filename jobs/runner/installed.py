"""What the owner installed on this host: the experiments folder (COMMONPLACE_EXPERIMENTS),
as the agent reports it when it registers. The lab lists it (`python -m jobs.lab own`,
in a child, as the agent starts every lab process: the agent stays stdlib only); the lab
reads each declaration as a literal, never running the owner's code, and a broken file
is an entry saying why. A listing that fails altogether is one broken entry too, so
nothing in the folder can stop the agent. The folder is watched by its files' names,
sizes and times: a change is reported by registering again.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

log = logging.getLogger("commonplace.runner")
FOLDER_ENV = "COMMONPLACE_EXPERIMENTS"  # (jobs/lab/catalogue/own.py reads the same)
REPO_ROOT = Path(__file__).resolve().parents[2]
LIST_TIMEOUT_S = 60


class Experiments:
    def __init__(self, folder: str | None = None) -> None:
        self.folder = folder if folder is not None else os.environ.get(FOLDER_ENV, "")
        self.seen: tuple = ()

    def _signature(self) -> tuple:
        if not self.folder:
            return ()
        try:
            return tuple(sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns)
                                for p in Path(self.folder).iterdir() if p.suffix == ".py"))
        except OSError:
            return ("unreadable",)

    def read(self) -> list[dict]:
        """Every declaration and broken entry, as the register call sends them."""
        self.seen = self._signature()
        if not self.folder:
            return []
        try:
            done = subprocess.run([sys.executable, "-m", "jobs.lab", "own", self.folder],
                                  cwd=REPO_ROOT, capture_output=True, text=True,
                                  timeout=LIST_TIMEOUT_S)
            listed = json.loads(done.stdout) if done.returncode == 0 else None
            why = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        except (OSError, subprocess.SubprocessError, ValueError) as exc:
            listed, why = None, str(exc)
        if isinstance(listed, list):
            return listed
        log.error("the experiments folder %s could not be listed: %s", self.folder, why)
        return [{"name": "folder", "file": self.folder[:200],
                 "broken": f"the lab could not list it: {why}"[:300]}]

    def changed(self) -> bool:
        return self._signature() != self.seen
