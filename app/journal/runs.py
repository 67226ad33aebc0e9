"""Runs: the one state machine, and every operation that moves a run through it.

    QUEUED → LEASED → RUNNING → SUCCEEDED | FAILED | CANCELLED | LOST
    QUEUED → CANCELLED | EXPIRED            (cancelled before a runner took it; waited too long)
    SKIPPED                                 (a schedule fire while that schedule's last run
                                             was unfinished; recorded, never launched)

Every change goes through `transition`, the only writer of run_event: a run is born by
a transition to QUEUED, and a cancel request is an event too. A run whose lease expires
becomes LOST and stays LOST: a duplicate GPU run wastes hours and pollutes comparisons,
so only the owner's Rerun (a new run, linked) launches it again.
Functions take an open write session and never commit. A run's files (log, artifacts)
are app/journal/run_files.py; a run that spans hosts (nodes > 1) is leased by a gang of
runners, whose nodes app/journal/gangs.py keeps.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

import sqlalchemy as sa
from sqlalchemy.orm import Session

from app.errors import BadState, Invalid, NotFound, Stale, TooLarge
from app.journal import catalogue, gangs, results, run_metrics, runners
from app.models import Metric, Run, RunEvent, Runner, RunNode, utcnow
from base import contract
from base.statuses import (
    ACTIVE,
    CANCELLED,
    EXPIRED,
    FAILED,
    LEASED,
    LOST,
    QUEUED,
    RUNNING,
    SKIPPED,
    SUCCEEDED,
    TERMINAL,
)
from jobs.lab.catalogue import registry

ALLOWED = {
    "": {QUEUED},  # a new run
    # SKIPPED: a schedule fire coalesced; FAILED: a stored schedule's params went stale
    QUEUED: {LEASED, CANCELLED, EXPIRED, SKIPPED, FAILED},
    LEASED: {RUNNING, SUCCEEDED, FAILED, CANCELLED, LOST},
    RUNNING: {SUCCEEDED, FAILED, CANCELLED, LOST},
}

# Why a run ended as it did: what the lab reports (forwarded by the runner), what the
# runner itself can tell (it could not start the lab; the lab was killed by a signal), and
# what only the server knows (leases, queues, schedules).
REASON_CODES = (*contract.LAB_REASONS, *contract.RUNNER_REASONS, "lease_expired",
                "queued_too_long", "previous_run_unfinished", "too_many_scheduled_runs", "")

MAX_METRIC_POINTS = 1000  # per call
MAX_RUN_METRICS = 100_000  # per run: a runaway loop cannot fill the disk


def get(session: Session, run_id: int) -> Run:
    run = session.get(Run, run_id)
    if run is None:
        raise NotFound(f"no run {run_id}")
    return run


def transition(session: Session, run: Run, to: str, *, actor: str, reason: str = "",
               reason_code: str = "", note: bool = False) -> None:
    """Move `run` to `to` and record who and why. The only writer of run_event.
    `note=True` records an event that changes nothing (a cancel request), so the run's
    history shows it too."""
    before = run.status or ""
    now = utcnow()
    if not note:
        if to == run.status:
            return  # idempotent: a retried call changes nothing
        if to not in ALLOWED.get(before, ()):
            raise BadState(f"run {run.id} is {run.status}; it cannot become {to}")
        run.status = to
        run.reason = reason[:1000]  # the reason of the latest change; the events keep them all
        run.reason_code = reason_code
        if to == LEASED:
            run.leased_at = now
        elif to == RUNNING:
            run.started_at = run.started_at or now
        elif to in TERMINAL:
            run.finished_at = now
            run.lease_expires_at = None
    if run.id is None:
        session.add(run)
        session.flush()  # a new run needs its id before its first event
    session.add(RunEvent(run_id=run.id, at=now, from_status=before, to_status=to,
                         actor=actor, reason=reason[:1000]))


# -- creating -----------------------------------------------------------------------------


def check_params(session: Session, experiment, params) -> dict:
    """The experiment's parameters, resolved against the catalogue (the lab's, or an own
    experiment's declaration a runner reported: catalogue.py), defaults filled in; or
    Invalid naming the parameter. Runs and schedules both ask here."""
    if not isinstance(experiment, str) or not experiment:
        raise Invalid("experiment is required", "experiment")
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise Invalid("params must be an object", "params")
    try:
        return catalogue.validate(session, experiment, params)
    except registry.ParamError as exc:
        raise Invalid(exc.message, exc.param) from None


def create(session: Session, experiment: str, params, *, actor: str, trigger: str = "manual",
           parent: Run | None = None, schedule_id: int | None = None,
           scheduled_for: dt.datetime | None = None, requires: dict | None = None,
           nodes=None) -> Run:
    """Validate against the catalogue and enqueue. Bad input raises Invalid naming
    the parameter, and nothing is written. `nodes`: hosts that run it together (1)."""
    resolved = check_params(session, experiment, params)
    hosts = gangs.check_nodes(nodes, experiment, resolved)
    needs = runners.requirements(resolved, requires, hosts)
    why = f"rerun of run {parent.id}" if parent else (
        f"schedule {schedule_id} fire at {scheduled_for:%Y-%m-%d %H:%M} UTC"
        if schedule_id else "")
    return enqueue(session, experiment, resolved, needs, actor=actor, trigger=trigger,
                   reason=why, parent_id=parent.id if parent else None,
                   schedule_id=schedule_id, scheduled_for=scheduled_for, nodes=hosts)


def enqueue(session: Session, experiment: str, params: dict, requires: dict, *, actor: str,
            trigger: str, reason: str = "", **links) -> Run:
    """A new QUEUED run with these (already checked) parameters."""
    run = Run(experiment=experiment, params=params, requires=requires, trigger=trigger,
              created_by=actor, created_at=utcnow(), progress={}, environment={}, **links)
    transition(session, run, QUEUED, actor=actor, reason=reason)
    run_metrics.index_params(session, run)
    return run


def skip(session: Session, run: Run, *, reason: str,
         reason_code: str = "previous_run_unfinished") -> None:
    """A schedule fire recorded but not launched (its previous run is unfinished, or the
    schedules have started as many runs as they may this minute)."""
    transition(session, run, SKIPPED, actor="scheduler", reason=reason,
               reason_code=reason_code)


def rerun(session: Session, run: Run, *, actor: str) -> Run:
    return create(session, run.experiment, run.params, actor=actor, trigger="rerun", parent=run,
                  requires=run.requires, nodes=run.nodes)


def cancel(session: Session, run: Run, *, actor: str) -> Run:
    """A queued run is cancelled at once; a leased or running one on the runner's next
    heartbeat (SIGTERM to its process group, a grace period, SIGKILL)."""
    if run.status == QUEUED:
        transition(session, run, CANCELLED, actor=actor, reason="cancelled before it started",
                   reason_code="cancelled")
    elif run.status in ACTIVE:
        if run.cancel_requested_at is None:
            run.cancel_requested_at = utcnow()
            transition(session, run, run.status, actor=actor, reason="cancel requested",
                       note=True)
    else:
        raise BadState(f"run {run.id} is {run.status}; there is nothing to cancel")
    return run


# -- the runner's side --------------------------------------------------------------------


def claim(session: Session, runner: Runner, ttl_s: float, *, offer: dict | None = None,
          gang_wait_s: float = 120.0) -> Run | None:
    """Lease the oldest queued run this runner can take. The caller's write transaction
    began with BEGIN IMMEDIATE, so two runners polling at once cannot both take it.
    A runner that offers a node (`offer`: its address and rendezvous port) may join a run
    that spans hosts; it gets that run once the whole gang has joined (gangs.py)."""
    gangs.release_expired(session, gang_wait_s / 2)
    mine = gangs.waiting(session, runner)
    if mine is not None:  # in a gang: nothing else until it forms or is released
        if mine.status != gangs.LEASED:
            return None
        mine.status = gangs.STARTED
        return get(session, mine.run_id)
    queued = session.scalars(
        sa.select(Run).where(Run.status == QUEUED).order_by(Run.id).limit(50)
    )
    for run in queued:
        if not (runners.matches(run.requires or {}, runner.labels or {})
                and catalogue.offers(runner, run.experiment)):
            continue
        if run.nodes == 1:
            _lease(session, run, runner, runner.id, runner.name, ttl_s)
            return run
        if offer is None or not gangs.may_join(session, run, runner):
            continue
        gang = gangs.join(session, run, runner, offer, gang_wait_s)
        if len(gang) < run.nodes:
            return None  # joined: the long poll asks again until the gang is full
        gangs.form(gang, ttl_s)
        gang[-1].status = gangs.STARTED  # handed out now; the others on their next poll
        _lease(session, run, runner, gang[0].runner_id,
               ", ".join(node.runner.name for node in gang), ttl_s)
        return run
    return None


def _lease(session: Session, run: Run, runner: Runner, holder: int, who: str,
           ttl_s: float) -> None:
    run.runner_id = holder  # node 0's runner, for a run that spans hosts
    run.lease_epoch += 1
    run.lease_expires_at = utcnow() + dt.timedelta(seconds=ttl_s)
    transition(session, run, LEASED, actor=f"runner:{runner.name}",
               reason=f"leased by {who} (epoch {run.lease_epoch})")


def held(session: Session, run_id: int, runner: Runner, epoch) -> Run:
    """The run, if this runner still holds its lease at this epoch; else Stale (409)."""
    if isinstance(epoch, bool) or not isinstance(epoch, int):
        raise Invalid("epoch (an integer) is required", "epoch")
    run = get(session, run_id)
    mine = (gangs.member(session, run, runner) is not None if run.nodes > 1
            else run.runner_id == runner.id)
    if not mine or run.lease_epoch != epoch or run.status not in ACTIVE:
        raise Stale(f"run {run_id} is not leased to {runner.name} at epoch {epoch} "
                    f"(it is {run.status}, epoch {run.lease_epoch}): stop the job")
    return run


def heartbeat(session: Session, run: Run, runner: Runner, ttl_s: float, *, step=None,
              total=None, progress: dict | None = None) -> dict:
    now = utcnow()
    runner.last_seen_at = now
    if run.nodes > 1:  # each node renews its own lease; progress is node 0's (rank 0's)
        node = gangs.member(session, run, runner)
        gangs.renew(session, run, node, ttl_s)
        if node.node_rank:
            step = total = progress = None
    else:
        run.lease_expires_at = now + dt.timedelta(seconds=ttl_s)
    if isinstance(step, int) and not isinstance(step, bool) and step >= 0:
        run.progress_step = step
    if isinstance(total, int) and not isinstance(total, bool) and total >= 0:
        run.progress_total = total
    if isinstance(progress, dict):
        run.progress = {str(k)[:40]: (v if isinstance(v, (int, float, str)) else str(v))
                        for k, v in list(progress.items())[:20]}
    return {"lease_expires_at": run.lease_expires_at.isoformat() + "Z",
            "cancel": run.cancel_requested_at is not None}


def add_metrics(session: Session, run: Run, points) -> int:
    if not isinstance(points, list) or len(points) > MAX_METRIC_POINTS:
        raise Invalid(f"points must be a list of at most {MAX_METRIC_POINTS}", "points")
    rows = []
    for i, point in enumerate(points):
        results.check_metric(point, f"points[{i}]")
        rows.append({"run_id": run.id, "key": point["key"], "step": point["step"],
                     "value": float(point["value"])})
    held = session.scalar(sa.select(sa.func.count()).select_from(Metric)
                          .where(Metric.run_id == run.id))
    if held + len(rows) > MAX_RUN_METRICS:
        raise TooLarge(f"a run keeps at most {MAX_RUN_METRICS} metric points "
                       f"(this one has {held})", "points")
    if rows:
        session.execute(sa.insert(Metric), rows)
    return len(rows)


def store_result(session: Session, run: Run, result) -> None:
    run.result = results.check_result(result)
    merge_environment(run, result.get("environment"))
    run_metrics.index_result(session, run)  # the scalar results the run list sorts by


def merge_environment(run: Run, env) -> None:
    """What the runner and the lab learnt about where the run ran (torch, CUDA, GPU,
    host), added to what was known: later reports refine earlier ones."""
    if isinstance(env, dict) and env:
        run.environment = {**(run.environment or {}),
                           **{str(k)[:40]: v if isinstance(v, (int, float, bool)) or v is None
                              else str(v)[:200] for k, v in list(env.items())[:40]}}


RUNNER_REPORTS = (RUNNING, SUCCEEDED, FAILED, CANCELLED)  # the statuses a runner sends


def finish(session: Session, run: Run, runner: Runner, to: str, *, reason: str,
           reason_code: str, exit_code) -> None:
    if to not in RUNNER_REPORTS:
        raise Invalid(f"to must be {', '.join(RUNNER_REPORTS[:-1])} or {RUNNER_REPORTS[-1]}",
                      "to")
    if reason_code not in REASON_CODES:
        raise Invalid(f"reason_code must be one of {', '.join(c for c in REASON_CODES if c)}",
                      "reason_code")
    if exit_code is not None and (isinstance(exit_code, bool) or not isinstance(exit_code, int)):
        raise Invalid("exit_code must be an integer", "exit_code")
    node = gangs.member(session, run, runner) if run.nodes > 1 else None
    if to == SUCCEEDED and run.result is None and (node is None or node.node_rank == 0):
        raise BadState("send the result before reporting SUCCEEDED")
    if exit_code is not None and (node is None or node.node_rank == 0 or to != SUCCEEDED):
        run.exit_code = exit_code
    if node is not None and to != RUNNING:  # one node's end; the run's when gangs says so
        decided = gangs.node_end(session, run, node, to, reason, reason_code)
        if decided is None:
            return
        to, reason, reason_code = decided
    transition(session, run, to, actor=f"runner:{runner.name}", reason=reason,
               reason_code=reason_code)


# -- the scheduler's side -----------------------------------------------------------------


def reap(session: Session, now: dt.datetime | None = None, *, ttl_s: float = 0,
         heard: Callable[[Run], dt.datetime | None] | None = None) -> list[int]:
    """Leases that ran out become LOST (with the reason); never re-queued. A runner the
    web heard but could not store (`heard`, liveness.py) renewed its lease when heard."""
    now = now or utcnow()
    expired = session.scalars(
        sa.select(Run).where(Run.status.in_(ACTIVE), Run.lease_expires_at < now))
    lost = []
    for run in expired:
        when = heard(run) if heard else None
        until = when + dt.timedelta(seconds=ttl_s) if when else None
        if until is not None and until > now:
            run.lease_expires_at = until
            session.execute(sa.update(RunNode).where(  # a gang's nodes, heard as one
                RunNode.run_id == run.id, RunNode.status.in_(gangs.HOLDING))
                .values(lease_expires_at=until))
            continue
        lost.append(run)
    for run in lost:
        late = (now - run.lease_expires_at).total_seconds() if run.lease_expires_at else 0
        runner = run.runner.name if run.runner else "its runner"
        if run.nodes > 1:
            runner = gangs.silent(session, run, now)
        transition(session, run, LOST, actor="reaper", reason_code="lease_expired",
                   reason=f"no heartbeat from {runner}: lease expired {late:.0f}s ago")
    return [run.id for run in lost]


def expire_queued(session: Session, max_age_s: float, now: dt.datetime | None = None) -> list[int]:
    now = now or utcnow()
    old = list(session.scalars(sa.select(Run).where(
        Run.status == QUEUED, Run.created_at < now - dt.timedelta(seconds=max_age_s))))
    for run in old:
        transition(session, run, EXPIRED, actor="reaper", reason_code="queued_too_long",
                   reason=f"no runner took it within {max_age_s / 3600:.1f} h")
    return [run.id for run in old]


def differing_params(group: list[Run]) -> set[str]:
    keys = set().union(*(r.params.keys() for r in group))
    return {k for k in keys if len({repr(r.params.get(k)) for r in group}) > 1}


def events(session: Session, run: Run) -> list[RunEvent]:
    return list(session.scalars(
        sa.select(RunEvent).where(RunEvent.run_id == run.id).order_by(RunEvent.id)))
