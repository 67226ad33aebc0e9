"""Bytecode for every process, written once where the installer can write.

The web runs under `python -OO` (app/supervisor.py WEB_PYTHON), and pip writes no
`.opt-2.pyc` for any package. Where nothing may write bytecode at run time (the image sets
PYTHONDONTWRITEBYTECODE and its user cannot write to /app or site-packages; the test suite's
sandboxes set the variable too), every web start compiled Flask, SQLAlchemy, gunicorn and the
app from source, and every other process the project's own modules. compileall writes the
files whatever that variable says, and a process then reads them as it reads any others.

    python -m app.bytecode     # deploy/docker-install.sh; tests/conftest.py calls compile_all
"""

from __future__ import annotations

import compileall
import re
from importlib import metadata
from pathlib import Path

from app import ROOT

PACKAGES = ("app", "base", "cpl", "jobs", "migrations")


def served_libraries() -> list[Path]:
    """The installed modules of the project's dependencies and theirs (not its extras':
    torch is never the web's): what the web's processes may import."""
    seen, todo, paths = set(), ["commonplace"], []
    while todo:
        name = todo.pop()
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:  # a requirement of another platform
            continue
        if name != "commonplace":
            paths += [Path(file.locate()) for file in dist.files or () if file.suffix == ".py"]
        for requirement in dist.requires or ():
            if "extra ==" in requirement:
                continue
            required = re.match(r"[A-Za-z0-9._-]+", requirement)[0].lower().replace("_", "-")
            if required not in seen:
                seen.add(required)
                todo.append(required)
    return paths


def compile_all() -> bool:
    """The project's modules at both levels its processes run at (plain, and the web's -OO),
    and the web's libraries at -OO (pip wrote their plain bytecode). Files already up to
    date are left alone. False if any failed to compile."""
    ok = all([compileall.compile_dir(ROOT / package, quiet=1, optimize=[0, 2])
              for package in PACKAGES])
    return all([compileall.compile_file(path, quiet=1, optimize=2)
                for path in served_libraries()]) and ok


if __name__ == "__main__":
    raise SystemExit(0 if compile_all() else 1)
