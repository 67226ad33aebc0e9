"""Files that are either whole or absent: write to a temporary file beside the target,
fsync it, rename it over the target, fsync the directory. A reader (the runner reading
result.json, the owner opening a mirror file) never sees half a file, and after a power
cut the file is the old one or the new one, never empty.

The one way the project writes such a file, on the server and on the GPU host alike, so
it lives at the bottom: stdlib only, importable without torch (app/ imports it too).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def write_atomic(path: str | os.PathLike, data: str | bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # A name is at most 255 bytes: the target's may be nearly that long already, so the
    # temporary one carries only its start (40 characters are at most 160 bytes).
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name[:40]}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data.encode("utf-8") if isinstance(data, str) else data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # the rename itself survives a power cut
    finally:
        os.close(dir_fd)


def write_json(path: str | os.PathLike, obj: Any, default=None) -> None:
    write_atomic(path, json.dumps(obj, indent=1, default=default))


def write_private(path: str | os.PathLike, data: str | bytes) -> None:
    """write_atomic for a file that may hold a secret (a token, a draft): a folder it makes
    is this user's only; the file is 0600, as mkstemp makes every file here."""
    Path(path).parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    write_atomic(path, data)
