"""Runner protocol views: parse, call app.runs, answer JSON. See docs/RUNNER.md."""

from __future__ import annotations

import hashlib
import re
import time
from pathlib import Path

import sqlalchemy as sa
from flask import current_app, g, jsonify, request

from app import runs
from app.api.views import json_body
from app.db import get_db
from app.entries import Invalid
from app.models import Run, RunArtifact, Runner, utcnow
from app.runner_api import bp

ARTIFACT_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
ARTIFACT_TYPES = {".json": "application/json", ".jsonl": "application/x-ndjson",
                  ".svg": "image/svg+xml", ".png": "image/png", ".txt": "text/plain",
                  ".log": "text/plain", ".csv": "text/csv"}
MAX_ARTIFACT = 8 * 1024 * 1024


def timings() -> dict:
    ttl = current_app.config["LEASE_TTL_S"]
    return {"lease_ttl_s": ttl, "heartbeat_s": ttl / 4, "poll_s": 30}


def runner_name() -> str:
    login = g.identity.login
    return login.split(":", 1)[1] if login.startswith("token:") else login


def current_runner(session) -> Runner:
    runner = session.scalar(sa.select(Runner).where(Runner.name == runner_name()))
    if runner is None:
        raise Invalid("register this runner first (POST /api/v1/runner/register)")
    return runner


@bp.post("/register")
def register():
    data = json_body()
    labels = data.get("labels", {})
    version = data.get("version", "")
    if not isinstance(labels, dict) or len(labels) > 20 or not all(
            isinstance(k, str) and isinstance(v, (str, int, float, bool))
            for k, v in labels.items()):
        raise Invalid("labels is an object of at most 20 simple values", "labels")
    if not isinstance(version, str) or len(version) > 50:
        raise Invalid("version is a short string", "version")
    with get_db().write() as session:
        runner = session.scalar(sa.select(Runner).where(Runner.name == runner_name()))
        if runner is None:
            runner = Runner(name=runner_name(), created_at=utcnow())
            session.add(runner)
        runner.labels = {k: v for k, v in labels.items()}
        runner.version = version
        runner.last_seen_at = utcnow()
    return jsonify(runner=runner_name(), **timings())


@bp.post("/lease")
def lease():
    """Long poll: wait up to `wait` seconds for a run this runner can take (204 if none).
    Each attempt is its own short write transaction, so waiting holds no lock."""
    data = json_body()
    wait = data.get("wait", 25)
    if isinstance(wait, bool) or not isinstance(wait, (int, float)) or not 0 <= wait <= 30:
        raise Invalid("wait is seconds from 0 to 30", "wait")
    ttl = current_app.config["LEASE_TTL_S"]
    deadline = time.monotonic() + wait
    while True:
        with get_db().write() as session:
            runner = current_runner(session)
            runner.last_seen_at = utcnow()
            run = runs.claim(session, runner, ttl)
            if run is not None:
                spec = {"id": run.id, "epoch": run.lease_epoch, "experiment": run.experiment,
                        "params": run.params, "requires": run.requires}
                return jsonify(run=spec, **timings())
        if time.monotonic() >= deadline:
            return "", 204
        time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))


def _held(session, run_id: int, data: dict) -> tuple[Run, Runner]:
    runner = current_runner(session)
    return runs.held(session, run_id, runner, data.get("epoch")), runner


@bp.post("/runs/<int:run_id>/heartbeat")
def heartbeat(run_id: int):
    data = json_body()
    with get_db().write() as session:
        run, runner = _held(session, run_id, data)
        answer = runs.heartbeat(session, run, runner, current_app.config["LEASE_TTL_S"],
                                step=data.get("step"), total=data.get("total"),
                                progress=data.get("progress"))
    return jsonify(answer)


@bp.post("/runs/<int:run_id>/transition")
def transition(run_id: int):
    data = json_body()
    reason = data.get("reason", "")
    if not isinstance(reason, str):
        raise Invalid("reason must be a string", "reason")
    environment = data.get("environment")
    if environment is not None and not isinstance(environment, dict):
        raise Invalid("environment must be an object", "environment")
    with get_db().write() as session:
        run, runner = _held(session, run_id, data)
        if environment:
            run.environment = {**(run.environment or {}),
                               **{str(k)[:40]: str(v)[:200] for k, v in
                                  list(environment.items())[:40]}}
        runs.finish(session, run, runner, data.get("to"), reason=reason,
                    reason_code=data.get("reason_code", ""), exit_code=data.get("exit_code"))
        status = run.status
    return jsonify(status=status)


@bp.post("/runs/<int:run_id>/logs")
def logs(run_id: int):
    data = json_body()
    with get_db().write() as session:
        run, _ = _held(session, run_id, data)
        size = runs.append_log(Path(current_app.config["DATA_DIR"]), session, run,
                               data.get("offset"), data.get("data"))
    return jsonify(size=size)


@bp.post("/runs/<int:run_id>/metrics")
def metrics(run_id: int):
    data = json_body()
    with get_db().write() as session:
        run, _ = _held(session, run_id, data)
        stored = runs.add_metrics(session, run, data.get("points"))
    return jsonify(stored=stored)


@bp.post("/runs/<int:run_id>/result")
def result(run_id: int):
    data = json_body()
    with get_db().write() as session:
        run, _ = _held(session, run_id, data)
        runs.store_result(session, run, data.get("result"))
    return jsonify(stored=True)


@bp.put("/runs/<int:run_id>/artifacts/<name>")
def artifact(run_id: int, name: str):
    if not ARTIFACT_NAME_RE.match(name) or ".." in name:
        raise Invalid("artifact names are letters, digits, '.', '_' and '-'", "name")
    content_type = ARTIFACT_TYPES.get(Path(name).suffix.lower())
    if content_type is None:
        raise Invalid(f"artifact types: {', '.join(sorted(ARTIFACT_TYPES))}", "name")
    try:
        epoch = int(request.args.get("epoch", ""))
    except ValueError:
        raise Invalid("epoch (an integer) is required", "epoch") from None
    body = request.get_data(cache=False)
    if len(body) > MAX_ARTIFACT:
        raise Invalid(f"an artifact is at most {MAX_ARTIFACT // (1024 * 1024)} MB", "body")
    with get_db().write() as session:
        run, _ = _held(session, run_id, {"epoch": epoch})
        path = Path(current_app.config["DATA_DIR"]) / "runs" / str(run.id) / "artifacts" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_bytes(body)
        tmp.replace(path)
        digest = hashlib.sha256(body).hexdigest()
        row = session.scalar(sa.select(RunArtifact).where(RunArtifact.run_id == run.id,
                                                          RunArtifact.name == name))
        if row is None:
            row = RunArtifact(run_id=run.id, name=name, content_type=content_type, size=0,
                              sha256="")
            session.add(row)
        row.size, row.sha256 = len(body), digest
    return jsonify(sha256=digest, size=len(body))
