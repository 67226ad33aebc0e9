"""A run's files on the server, and the one place their paths are made:

    <data>/runs/<id>/log.txt               the log, appended by byte offset as it streams in
    <data>/runs/<id>/artifacts/<name>      what the run produced (events.jsonl, charts)

The log is retry-safe: a chunk the server already has is acknowledged again, and a gap is
refused so the runner resends from what we have. Artifacts are written whole
(base.durable) before their row says they exist.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.orm import Session

from app.errors import Invalid, LogGap, NotFound, TooLarge
from app.models import Run, RunArtifact
from base.durable import write_atomic

MAX_LOG_CHUNK = 64 * 1024
MAX_LOG_BYTES = 64 * 1024 * 1024  # per run; past it chunks are counted, not kept
ARTIFACT_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
ARTIFACT_TYPES = {".json": "application/json", ".jsonl": "application/x-ndjson",
                  ".svg": "image/svg+xml", ".png": "image/png", ".txt": "text/plain",
                  ".log": "text/plain", ".csv": "text/csv"}
MAX_ARTIFACT = 8 * 1024 * 1024
MAX_ARTIFACTS = 32  # per run
MAX_ARTIFACT_BYTES = 64 * 1024 * 1024  # per run, all artifacts together


def run_dir(data_dir: Path, run_id: int) -> Path:
    return Path(data_dir) / "runs" / str(run_id)


def log_path(data_dir: Path, run_id: int) -> Path:
    return run_dir(data_dir, run_id) / "log.txt"


def artifact_path(data_dir: Path, run_id: int, name: str) -> Path:
    return run_dir(data_dir, run_id) / "artifacts" / name


# -- the log ------------------------------------------------------------------------------


def append_log(data_dir: Path, session: Session, run: Run, offset, data) -> int:
    """Append a chunk at byte `offset` of the run's log; returns the log's size."""
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise Invalid("offset (a non-negative integer) is required", "offset")
    if not isinstance(data, str):
        raise Invalid("data must be a string", "data")
    raw = data.encode("utf-8")
    if len(raw) > MAX_LOG_CHUNK:
        raise Invalid(f"a log chunk is at most {MAX_LOG_CHUNK} bytes", "data")
    if offset > run.log_size:
        raise LogGap(run.log_size, offset)
    new = raw[run.log_size - offset:]
    room = MAX_LOG_BYTES - run.log_size
    if new and room > 0:
        path = log_path(data_dir, run.id)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "ab") as fh:
            fh.write(new[:room])
    # A runaway log cannot fill the disk: beyond the cap its bytes are only counted, so the
    # runner's offsets still line up and the run carries on.
    run.log_size += len(new)
    return run.log_size


def read_log(data_dir: Path, run: Run, offset: int, limit: int = 256 * 1024) -> tuple[str, int]:
    path = log_path(data_dir, run.id)
    kept = min(run.log_size, MAX_LOG_BYTES)
    if not path.exists() or offset >= kept:
        return "", min(offset, run.log_size)
    with open(path, "rb") as fh:
        fh.seek(offset)
        chunk = fh.read(min(limit, kept - offset))
    # Never split a UTF-8 character: hand back only whole ones, the rest comes next time.
    text = chunk.decode("utf-8", errors="ignore")
    return text, offset + len(text.encode("utf-8"))


# -- artifacts ----------------------------------------------------------------------------


def store_artifact(data_dir: Path, session: Session, run: Run, name: str,
                   body: bytes) -> RunArtifact:
    """Keep one file a run produced (replacing an earlier upload of the same name)."""
    if not ARTIFACT_NAME_RE.match(name) or ".." in name:
        raise Invalid("artifact names are letters, digits, '.', '_' and '-'", "name")
    content_type = ARTIFACT_TYPES.get(Path(name).suffix.lower())
    if content_type is None:
        raise Invalid(f"artifact types: {', '.join(sorted(ARTIFACT_TYPES))}", "name")
    if len(body) > MAX_ARTIFACT:
        raise TooLarge(f"an artifact is at most {MAX_ARTIFACT // (1024 * 1024)} MB", "body")
    others = session.execute(sa.select(sa.func.count(), sa.func.coalesce(sa.func.sum(
        RunArtifact.size), 0)).where(RunArtifact.run_id == run.id, RunArtifact.name != name)).one()
    if others[0] + 1 > MAX_ARTIFACTS:
        raise TooLarge(f"a run keeps at most {MAX_ARTIFACTS} artifacts", "name")
    if others[1] + len(body) > MAX_ARTIFACT_BYTES:
        raise TooLarge(f"a run's artifacts are at most {MAX_ARTIFACT_BYTES // (1024 * 1024)} MB "
                       "together", "body")
    write_atomic(artifact_path(data_dir, run.id, name), body)
    row = session.scalar(sa.select(RunArtifact).where(RunArtifact.run_id == run.id,
                                                      RunArtifact.name == name))
    if row is None:
        row = RunArtifact(run_id=run.id, name=name, content_type=content_type, size=0,
                          sha256="")
        session.add(row)
    row.size, row.sha256 = len(body), hashlib.sha256(body).hexdigest()
    return row


def artifacts(session: Session, run: Run) -> list[RunArtifact]:
    return list(session.scalars(sa.select(RunArtifact).where(RunArtifact.run_id == run.id)
                                .order_by(RunArtifact.name)))


def find_artifact(data_dir: Path, session: Session, run_id: int,
                  name: str) -> tuple[RunArtifact, Path]:
    row = session.scalar(sa.select(RunArtifact).where(RunArtifact.run_id == run_id,
                                                      RunArtifact.name == name))
    path = artifact_path(data_dir, run_id, name)
    if row is None or not path.exists():
        raise NotFound(f"run {run_id} has no artifact {name!r}")
    return row, path
