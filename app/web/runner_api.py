"""/api/v1/runner: the pull API of the runner agents (register, lease, heartbeat, …).

Runners authenticate with a bearer token of role `runner` (app/web/auth/policy.py lets
that role call this blueprint and nothing else). Every call after the lease carries
(run_id, epoch); a stale epoch answers 409 and the agent kills its job. Views parse,
call app/journal (runs, run_files, gangs for runs that span hosts) and answer JSON; the
protocol is docs/RUNNER.md.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from pathlib import Path

import sqlalchemy as sa
from flask import Blueprint, current_app, g, jsonify, request

from app.db import OPERATIONAL, get_db, locked
from app.errors import Invalid
from app.journal import catalogue, gangs, liveness, run_files, runners, runs
from app.models import Run, Runner, utcnow
from app.web.parsing import json_body

bp = Blueprint("runner", __name__, url_prefix="/api/v1/runner")
# Set when this worker is told to stop (gunicorn.conf.py's worker_int): a long poll answers
# 204 at once instead of keeping the worker, and Ctrl-C, waiting out its wait.
STOPPING = threading.Event()
HEARTBEAT_TRIES = 2  # each waits up to the busy timeout for the write lock


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
    experiments = catalogue.check_report(data.get("experiments"))
    with get_db().write() as session:
        runner = session.scalar(sa.select(Runner).where(Runner.name == runner_name()))
        if runner is None:
            runner = Runner(name=runner_name(), created_at=utcnow())
            session.add(runner)
        runner.labels = {k: v for k, v in labels.items()}
        runner.version = version
        runner.experiments = experiments
        runner.last_seen_at = utcnow()
    return jsonify(runner=runner_name(), **timings())


@bp.post("/lease")
def lease():
    """Long poll: wait up to `wait` seconds for a run this runner can take (204 if none).
    Each attempt is its own short write transaction, so waiting holds no lock. A runner
    that offers a `node` ({address, port}) may join a run that spans hosts: its lease
    then says which node it is and where the rendezvous is (`gang`)."""
    data = json_body()
    wait = data.get("wait", 25)
    if isinstance(wait, bool) or not isinstance(wait, (int, float)) or not 0 <= wait <= 30:
        raise Invalid("wait is seconds from 0 to 30", "wait")
    offer = gangs.check_offer(data.get("node"))
    ttl = current_app.config["LEASE_TTL_S"]
    deadline = time.monotonic() + wait
    while True:
        with get_db().write() as session:
            runner = current_runner(session)
            runners.seen(runner, utcnow())
            run = runs.claim(session, runner, ttl, offer=offer,
                             gang_wait_s=current_app.config["GANG_WAIT_S"])
            if run is not None:
                spec = {"id": run.id, "epoch": run.lease_epoch, "experiment": run.experiment,
                        "params": run.params, "requires": run.requires}
                if run.nodes > 1:
                    spec["gang"] = gangs.spec(session, run, gangs.member(session, run, runner))
                return jsonify(run=spec, **timings())
        if time.monotonic() >= deadline or STOPPING.is_set():
            return "", 204
        STOPPING.wait(min(0.5, max(0.0, deadline - time.monotonic())))


def _held(session, run_id: int, data: dict) -> tuple[Run, Runner]:
    runner = current_runner(session)
    return runs.held(session, run_id, runner, data.get("epoch")), runner


@bp.post("/runs/<int:run_id>/heartbeat")
def heartbeat(run_id: int):
    """Renew the lease. While another writer holds the database past the busy timeout,
    try again a few times; then note that the runner was heard (liveness.py: the reaper
    counts it as a renewal) and answer as a renewal would, from what can be read."""
    data = json_body()
    ttl = current_app.config["LEASE_TTL_S"]
    for _ in range(HEARTBEAT_TRIES):
        try:
            with get_db().write() as session:
                run, runner = _held(session, run_id, data)
                return jsonify(runs.heartbeat(session, run, runner, ttl, step=data.get("step"),
                                              total=data.get("total"),
                                              progress=data.get("progress")))
        except OPERATIONAL as exc:
            if not locked(exc):
                raise
    with get_db().read() as reader:
        run, _ = _held(reader, run_id, data)
        liveness.heard(Path(current_app.config["DATA_DIR"]), run.id, run.lease_epoch)
        until = utcnow() + dt.timedelta(seconds=ttl)
        return jsonify(lease_expires_at=until.isoformat() + "Z",
                       cancel=run.cancel_requested_at is not None, noted=True)


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
        if run.nodes == 1 or gangs.member(session, run, runner).node_rank == 0:
            runs.merge_environment(run, environment)
        runs.finish(session, run, runner, data.get("to"), reason=reason,
                    reason_code=data.get("reason_code", ""), exit_code=data.get("exit_code"))
        status = run.status
    return jsonify(status=status)


@bp.post("/runs/<int:run_id>/logs")
def logs(run_id: int):
    data = json_body()
    data_dir = Path(current_app.config["DATA_DIR"])
    with get_db().write() as session:
        run, runner = _held(session, run_id, data)
        if run.nodes > 1:  # by the node's own offset, into the run's one log
            size = gangs.append_log(data_dir, session, run, gangs.member(session, run, runner),
                                    data.get("offset"), data.get("data"))
        else:
            size = run_files.append_log(data_dir, session, run, data.get("offset"),
                                        data.get("data"))
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
        run, runner = _held(session, run_id, data)
        if run.nodes > 1 and gangs.member(session, run, runner).node_rank != 0:
            raise Invalid("only node 0 sends the result (rank 0's result.json)", "result")
        runs.store_result(session, run, data.get("result"))
    return jsonify(stored=True)


@bp.put("/runs/<int:run_id>/artifacts/<name>")
def artifact(run_id: int, name: str):
    try:
        epoch = int(request.args.get("epoch", ""))
    except ValueError:
        raise Invalid("epoch (an integer) is required", "epoch") from None
    body = request.get_data(cache=False)
    with get_db().write() as session:
        run, _ = _held(session, run_id, {"epoch": epoch})
        row = run_files.store_artifact(Path(current_app.config["DATA_DIR"]), session, run,
                                       name, body)
    return jsonify(sha256=row.sha256, size=row.size)
