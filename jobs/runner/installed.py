"""What the owner installed on this host: the experiments folder (COMMONPLACE_EXPERIMENTS),
as the agent reports it when it registers. Reading it never runs the owner's code
(jobs/lab/catalogue/own.py reads each declaration as a literal, torch-free), and a broken
file is an entry saying why, so nothing in the folder can stop the agent. The folder is
watched by its files' names, sizes and times: a change is reported by registering again.
"""

from __future__ import annotations

import os
from pathlib import Path

from jobs.lab.catalogue import own


class Experiments:
    def __init__(self, folder: str | None = None) -> None:
        self.folder = folder if folder is not None else os.environ.get(own.FOLDER_ENV, "")
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
        return own.read_folder(self.folder) if self.folder else []

    def changed(self) -> bool:
        return self._signature() != self.seen
