"""The site's folder: a file is written only when its bytes changed, and a file the last
publish wrote that this one does not is removed. What was written is listed in the
folder's manifest; a file the manifest does not list is never touched, and a folder
with files in it but no manifest is refused (it is not a site this command made)."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

MANIFEST = ".commonplace-publish.json"


class NotOurs(Exception):
    """The folder holds files that no publish wrote."""


@dataclass
class Written:
    written: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    unchanged: int = 0


def _inside(root: Path, name: str) -> Path | None:
    """The manifest's path as a file in `root`, or None if it would lead out of it."""
    path = (root / name).resolve()
    return path if path.is_relative_to(root) and path != root else None


def _manifest(root: Path) -> dict[str, str]:
    try:
        listed = json.loads((root / MANIFEST).read_text())["files"]
    except FileNotFoundError:
        if any(root.iterdir()):
            raise NotOurs(f"{root} has files in it, but no publish wrote them "
                          f"(no {MANIFEST}): publish to a new or empty folder") from None
        return {}
    except (ValueError, KeyError, TypeError):
        raise NotOurs(f"{root / MANIFEST} is not a publish manifest") from None
    return {k: v for k, v in listed.items() if isinstance(k, str) and isinstance(v, str)}


def write(root: Path, files: dict[str, bytes]) -> Written:
    _folder(root)
    root = root.resolve()
    before = _manifest(root)
    done = Written()
    now: dict[str, str] = {}
    for name, data in sorted(files.items()):
        path = _inside(root, name)
        if path is None:
            raise ValueError(f"{name!r} is not a path inside the site")
        now[name] = hashlib.sha256(data).hexdigest()
        try:
            same = path.read_bytes() == data
        except OSError:
            same = False
        if same:
            done.unchanged += 1
            continue
        _put(path, data)
        done.written.append(name)
    for name in sorted(set(before) - set(now)):
        path = _inside(root, name)
        if path is not None and path.is_file():
            path.unlink()
            done.removed.append(name)
            _prune(root, path.parent)
    manifest = json.dumps({"files": now}, indent=1, sort_keys=True).encode() + b"\n"
    if done.written or done.removed or not (root / MANIFEST).exists():
        _put(root / MANIFEST, manifest)
    return done


def _put(path: Path, data: bytes) -> None:
    """Replace the file whole (a reader never sees half of it), readable by the web server
    that serves the folder: a temporary file of mkstemp's would be the owner's alone."""
    _folder(path.parent)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _folder(path: Path) -> None:
    """Make the folder and any missing above it 0755: the commonplace process keeps a
    0077 umask (its notebook is private), which would leave the site's folders unreadable
    to the web server that serves them. A folder that exists already is left as it is."""
    if path.is_dir():
        return
    _folder(path.parent)
    path.mkdir(exist_ok=True)
    os.chmod(path, 0o755)


def _prune(root: Path, folder: Path) -> None:
    """Folders a removal left empty, up to the site's root (no other files are in them)."""
    while folder != root and folder.is_relative_to(root):
        try:
            os.rmdir(folder)
        except OSError:
            return
        folder = folder.parent
