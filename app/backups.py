"""Backups you can restore: one archive of everything the notebook holds, checked on the
way in and on the way out.

    commonplace-<UTC stamp>-<reason>.tar.gz
        manifest.json           format, app version, schema revision, row counts, and the
                                size and sha256 of every other member
        commonplace.db          an online SQLite backup (consistent while in use)
        attachments/ab/<sha>    uploaded files
        runs/<id>/log.txt       each run's log, as much of it as the database counts
        runs/<id>/artifacts/…   each run's artifacts

The database is copied first, with SQLite's online backup API, so the archive is the
notebook at that moment: every later file is read as that copy describes it (a run's log
up to its log_size; the attachments and artifacts its rows name). Web, scheduler and
runners keep working while it runs. The letter template, tokens and schedules are rows,
so they are in the database copy. The plain-markdown mirror is derived from the database
and is rebuilt on restore (`commonplace export` writes it anew).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import io
import json
import os
import shutil
import sqlite3
import tarfile
import tempfile
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

FORMAT = 1
MANIFEST = "manifest.json"
DATABASE = "commonplace.db"
COUNTED = ("entry", "revision", "entry_tag", "link", "attachment", "setting", "token",
           "run", "run_event", "metric", "run_artifact", "schedule", "runner")
ARCHIVE_GLOB = "commonplace-*.tar.gz"
STALE_AFTER = dt.timedelta(days=2)


class BackupError(Exception):
    """An archive that cannot be trusted, or a restore that would lose something."""


@dataclass
class Manifest:
    created_at: str
    app_version: str
    schema_revision: str
    counts: dict[str, int]
    files: dict[str, dict] = field(default_factory=dict)  # member → {size, sha256}
    format: int = FORMAT

    def as_json(self) -> bytes:
        return json.dumps(self.__dict__, indent=1, sort_keys=True).encode()


def app_version() -> str:
    try:
        return version("commonplace")
    except PackageNotFoundError:
        return "unknown"


# -- making one ---------------------------------------------------------------------------


def create(database_path: Path, data_dir: Path, dest_dir: Path, reason: str = "backup",
           dest: Path | None = None) -> tuple[Path, Manifest]:
    """Write an archive of the notebook at `database_path` and the files under `data_dir`
    into `dest_dir` (or exactly `dest`). Returns its path and manifest."""
    stamp = dt.datetime.now(dt.UTC)
    dest = dest or dest_dir / f"commonplace-{stamp:%Y%m%dT%H%M%S%fZ}-{reason}.tar.gz"
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=".backup-") as work:
        snapshot = Path(work) / DATABASE
        with contextlib.closing(sqlite3.connect(database_path)) as src, \
                contextlib.closing(sqlite3.connect(snapshot)) as dst:
            src.backup(dst)
        manifest = Manifest(created_at=stamp.isoformat(), app_version=app_version(),
                            schema_revision=_schema_revision(snapshot),
                            counts=_counts(snapshot))
        partial = dest.with_name(f".{dest.name}.partial")
        with tarfile.open(partial, "w:gz") as tar:
            _add_file(tar, manifest, DATABASE, snapshot)
            for member, path, limit in _data_files(snapshot, data_dir):
                _add_file(tar, manifest, member, path, limit)
            info = tarfile.TarInfo(MANIFEST)
            body = manifest.as_json()
            info.size, info.mtime = len(body), int(stamp.timestamp())
            tar.addfile(info, io.BytesIO(body))
        with open(partial, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(partial, dest)  # an archive is whole or absent
    return dest, manifest


def _data_files(snapshot: Path, data_dir: Path):
    """(member, path, bytes to take) for every file the database copy refers to."""
    with contextlib.closing(sqlite3.connect(snapshot)) as db:
        shas = [row[0] for row in db.execute("SELECT DISTINCT sha256 FROM attachment")]
        logs = list(db.execute("SELECT id, log_size FROM run WHERE log_size > 0"))
        artifacts = list(db.execute("SELECT run_id, name FROM run_artifact"))
    for sha in sorted(shas):
        path = data_dir / "attachments" / sha[:2] / sha
        if path.is_file():
            yield f"attachments/{sha[:2]}/{sha}", path, None
    for run_id, size in logs:
        path = data_dir / "runs" / str(run_id) / "log.txt"
        if path.is_file():
            yield f"runs/{run_id}/log.txt", path, size
    for run_id, name in artifacts:
        path = data_dir / "runs" / str(run_id) / "artifacts" / name
        if path.is_file():
            yield f"runs/{run_id}/artifacts/{name}", path, None


def _add_file(tar: tarfile.TarFile, manifest: Manifest, member: str, path: Path,
              limit: int | None = None) -> None:
    with open(path, "rb") as fh:
        data = fh.read() if limit is None else fh.read(limit)
    info = tarfile.TarInfo(member)
    info.size, info.mtime = len(data), int(path.stat().st_mtime)
    tar.addfile(info, io.BytesIO(data))
    manifest.files[member] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def _schema_revision(database: Path) -> str:
    with contextlib.closing(sqlite3.connect(database)) as db:
        try:
            row = db.execute("SELECT version_num FROM alembic_version").fetchone()
        except sqlite3.Error:
            return ""
    return row[0] if row else ""


def _counts(database: Path) -> dict[str, int]:
    with contextlib.closing(sqlite3.connect(database)) as db:
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        return {t: db.execute(f"SELECT count(*) FROM {t}").fetchone()[0]  # noqa: S608
                for t in COUNTED if t in tables}


# -- checking one -------------------------------------------------------------------------


def verify(archive: Path, into: Path | None = None) -> Manifest:
    """Check every member against the manifest (size, sha256), that nothing is missing or
    extra, and that the database opens and passes SQLite's integrity check. With `into`,
    the checked files are also extracted there. Raises BackupError naming the problem."""
    try:
        with tarfile.open(archive, "r:gz") as tar:
            names = tar.getnames()
            if MANIFEST not in names:
                raise BackupError(f"{archive} has no {MANIFEST}: not a Commonplace backup")
            manifest = Manifest(**json.loads(_read(tar, MANIFEST)))
            if manifest.format != FORMAT:
                raise BackupError(f"archive format {manifest.format}; this version reads "
                                  f"{FORMAT}")
            extra = set(names) - set(manifest.files) - {MANIFEST}
            if extra:
                raise BackupError(f"{archive} holds files its manifest does not list: "
                                  f"{sorted(extra)[:3]}")
            for member, want in manifest.files.items():
                if member not in names:
                    raise BackupError(f"{archive} lacks {member}")
                data = _read(tar, member)
                if len(data) != want["size"] or hashlib.sha256(data).hexdigest() != want["sha256"]:
                    raise BackupError(f"{member} in {archive} does not match its checksum")
                if into is not None:
                    target = _safe_join(into, member)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(data)
                elif member == DATABASE:
                    with tempfile.TemporaryDirectory() as scratch:
                        (Path(scratch) / DATABASE).write_bytes(data)
                        _check_database(Path(scratch) / DATABASE)
    except (tarfile.TarError, EOFError, OSError, ValueError, TypeError, KeyError) as exc:
        raise BackupError(f"{archive} cannot be read as a backup: {exc}") from exc
    if into is not None:
        _check_database(into / DATABASE)
    return manifest


def _read(tar: tarfile.TarFile, member: str) -> bytes:
    handle = tar.extractfile(member)
    if handle is None:
        raise BackupError(f"{member} is not a file")
    return handle.read()


def _safe_join(root: Path, member: str) -> Path:
    target = (root / member).resolve()
    if not target.is_relative_to(root.resolve()) or member.startswith("/"):
        raise BackupError(f"{member}: a path outside the data directory")
    return target


def _check_database(path: Path) -> None:
    try:
        with contextlib.closing(sqlite3.connect(path)) as db:
            result = db.execute("PRAGMA integrity_check").fetchone()[0]
    except sqlite3.Error as exc:
        raise BackupError(f"the database in the archive does not open: {exc}") from exc
    if result != "ok":
        raise BackupError(f"the database in the archive fails its integrity check: {result}")


# -- restoring one ------------------------------------------------------------------------


def restore(archive: Path, data_dir: Path, force: bool = False) -> tuple[Manifest, Path | None]:
    """Put the archive's notebook in `data_dir`. A data directory with anything in it is
    refused unless `force`, and then moved aside (never deleted). Everything is checked
    before anything is moved. Returns the manifest and where the old directory went."""
    data_dir = data_dir.expanduser().absolute()
    occupied = data_dir.exists() and any(data_dir.iterdir())
    if occupied and not force:
        raise BackupError(f"{data_dir} is not empty: restore into an empty or new directory, "
                          "or pass --force to move the current one aside first")
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=data_dir.parent, prefix=f".{data_dir.name}.restore-"))
    try:
        manifest = verify(archive, into=staging)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    aside = None
    if data_dir.exists():
        if occupied:
            stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S")
            aside = data_dir.with_name(f"{data_dir.name}.before-restore-{stamp}")
            data_dir.rename(aside)
        else:
            data_dir.rmdir()
    staging.rename(data_dir)
    return manifest, aside


# -- the archives kept --------------------------------------------------------------------


def archives(backup_dir: Path) -> list[Path]:
    """The archives in `backup_dir`, newest first."""
    return sorted(backup_dir.glob(ARCHIVE_GLOB), key=lambda p: p.stat().st_mtime, reverse=True)


def prune(backup_dir: Path, keep_days: float, reason: str = "nightly") -> list[Path]:
    """Remove `reason` archives older than `keep_days` (and the database-only nightly
    copies of earlier versions)."""
    cutoff = dt.datetime.now().timestamp() - keep_days * 86400
    gone = [p for pattern in (f"commonplace-*-{reason}.tar.gz", f"commonplace-*-{reason}.db")
            for p in backup_dir.glob(pattern) if p.stat().st_mtime < cutoff]
    for path in gone:
        path.unlink()
    return gone


def last_backup(backup_dir: Path, now: dt.datetime | None = None) -> dict:
    """When the newest archive was made, and a warning when that is more than two days
    ago (or never): what /healthz reports."""
    found = archives(backup_dir) if backup_dir.is_dir() else []
    if not found:
        return {"at": None, "age_hours": None,
                "warning": "no backup yet: run `commonplace backup` (the scheduler makes one "
                           "nightly)"}
    at = dt.datetime.fromtimestamp(found[0].stat().st_mtime, dt.UTC)
    age = (now or dt.datetime.now(dt.UTC)) - at
    report = {"at": at.isoformat().replace("+00:00", "Z"),
              "age_hours": round(age.total_seconds() / 3600, 1)}
    if age > STALE_AFTER:
        report["warning"] = f"the last backup is {age.days} days old"
    return report
