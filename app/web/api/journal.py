"""/api/v1 for the journal: experiments, runs and schedules, as the run pages offer them."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import sqlalchemy as sa
from flask import current_app, jsonify, request, send_file

from app.db import get_session
from app.errors import Invalid, NotFound, refuse_unknown
from app.journal import catalogue as known
from app.journal import (
    cron_phrases,
    gangs,
    run_files,
    run_query,
    runners,
    runs,
    schedules,
    trends,
)
from app.journal.views import card_trend, rank_events, trace
from app.models import Metric, Run, RunArtifact, RunEvent, Schedule
from app.web.access import author
from app.web.api.blueprint import bp
from app.web.hardening import INERT_CSP
from app.web.parsing import int_arg, json_body
from base.contract import progress_words
from jobs.lab.catalogue import registry


def iso(moment) -> str | None:
    return None if moment is None else moment.isoformat() + "Z"


def run_json(run: Run, *, full: bool = False, details: dict | None = None) -> dict:
    """A run (or a row of the run list) as the API shows it; `full` adds its result,
    events, reruns and artifacts (`details`: those of several runs read at once by
    `full_details`)."""
    data = {
        "id": run.id, "experiment": run.experiment, "status": run.status,
        "reason": run.reason, "reason_code": run.reason_code, "trigger": run.trigger,
        "parent_id": run.parent_id, "schedule_id": run.schedule_id,
        "scheduled_for": iso(run.scheduled_for), "created_by": run.created_by,
        "created_at": iso(run.created_at), "leased_at": iso(run.leased_at),
        "started_at": iso(run.started_at), "finished_at": iso(run.finished_at),
        "cancel_requested": run.cancel_requested_at is not None,
        "runner": run.runner_name,
        "progress": {"step": run.progress_step, "total": run.progress_total, **run.progress},
        "progress_text": progress_words(run.progress_step or 0, run.progress_total or 0,
                                        run.progress or {}),
        "params": run.params, "nodes": run.nodes, "url": f"/runs/{run.id}",
    }
    if full:
        session = get_session()
        events, reruns, artifacts = (details or full_details(session, [run]))[run.id]
        data.update(
            requires=run.requires, exit_code=run.exit_code, environment=run.environment,
            result=run.result, log_size=run.log_size,
            events=[{"at": iso(e.at), "from": e.from_status, "to": e.to_status,
                     "actor": e.actor, "reason": e.reason} for e in events],
            reruns=reruns,
            artifacts=[{"name": a.name, "size": a.size, "content_type": a.content_type,
                        "url": f"/api/v1/runs/{run.id}/artifacts/{a.name}"}
                       for a in artifacts],
            letter_entry_id=run.carded_entry_id,
            gang=gangs.members_json(session, run) if run.nodes > 1 else [],
        )
        if run.status == runs.QUEUED:
            data["waiting"] = runners.availability(session, run.requires or {})[1]
        if run.status == runs.SUCCEEDED:
            data["since"] = since_json(session, run)
    return data


def since_json(session, run: Run) -> dict | None:
    """What the run's card says of the runs before it (card_trend.lines), for a client to
    print the same words; None for a run with no numbers."""
    found = trends.trend(session, run)
    if found is None:
        return None
    return {"previous": found.previous.id if found.previous else None,
            "trend_url": card_trend.trend_url(found),
            "edited_from": found.edited_from.id if found.edited_from else None,
            "edited": found.edited,
            "lines": [{"text": text, "regression": bad} for text, bad in
                      card_trend.lines(found, current_app.config["TIMEZONE"])]}


def full_details(session, group: list[Run]) -> dict[int, tuple[list, list, list]]:
    """Each run's events, reruns and artifacts: three queries however many runs."""
    ids = [run.id for run in group]
    out: dict[int, tuple[list, list, list]] = {i: ([], [], []) for i in ids}
    for event in session.scalars(sa.select(RunEvent).where(RunEvent.run_id.in_(ids))
                                 .order_by(RunEvent.id)):
        out[event.run_id][0].append(event)
    for child, parent in session.execute(sa.select(Run.id, Run.parent_id)
                                         .where(Run.parent_id.in_(ids)).order_by(Run.id)):
        out[parent][1].append(child)
    for artifact in session.scalars(sa.select(RunArtifact).where(RunArtifact.run_id.in_(ids))
                                    .order_by(RunArtifact.name)):
        out[artifact.run_id][2].append(artifact)
    return out


def schedule_json(schedule: Schedule) -> dict:
    try:
        fires = schedules.next_fires(schedule.cron, schedule.timezone, 5)
    except Invalid:
        fires = []
    return {
        "id": schedule.id, "name": schedule.name, "experiment": schedule.experiment,
        "params": schedule.params, "cron": schedule.cron, "timezone": schedule.timezone,
        "enabled": schedule.enabled, "misfire_grace_s": schedule.misfire_grace_s,
        "last_fired_at": iso(schedule.last_fired_at),
        "next_fires": [iso(t.astimezone(dt.UTC).replace(tzinfo=None)) for t in fires],
        "next_fires_local": [t.isoformat() for t in fires],
        "url": f"/schedules/{schedule.id}",
    }


# -- experiments --------------------------------------------------------------------------


@bp.get("/experiments")
def list_experiments():
    session = get_session()
    return jsonify(experiments=known.catalogue(session), broken=known.broken(session))


@bp.get("/experiments/<name>")
def get_experiment(name: str):
    try:
        return jsonify(known.describe(get_session(), name))
    except registry.UnknownExperiment:
        raise NotFound(f"no experiment {name!r}") from None


# -- runs ---------------------------------------------------------------------------------


@bp.get("/runs")
def list_runs():
    """The run list (app/journal/run_query.py): filters, a sort by any scalar result, and
    keyset paging by next_cursor (offset still works)."""
    limit = int_arg("limit", 50, 1, 500)
    offset = int_arg("offset", 0, 0, 10_000_000)
    found = run_query.listing(request.args, current_app.config["TIMEZONE"])
    if run_query.arg(request.args, "experiment"):
        known.check_filter(get_session(), run_query.arg(request.args, "experiment"))
    if found.sort:
        known.check_sort(get_session(), found.sort)
    rows, cursor = found.page(get_session(), limit, offset=offset)
    items = []
    for run, value in rows:
        items.append(run_json(run))
        if found.sort:
            items[-1]["sort_value"] = value
    return jsonify(runs=items, has_more=bool(cursor), next_cursor=cursor or None,
                   sort=found.sort or None, order=found.order)


@bp.post("/runs")
def create_run():
    data = json_body()
    refuse_unknown(data, ("experiment", "params", "requires", "nodes", "queue_anyway"))
    anyway = data.get("queue_anyway", False)
    if not isinstance(anyway, bool):
        raise Invalid("queue_anyway is true or false", "queue_anyway")
    session = get_session()
    run = runs.create(session, data.get("experiment"), data.get("params", {}),
                      actor=author(), requires=data.get("requires"), nodes=data.get("nodes"))
    # As the run form does: a run no registered runner can take would wait a day and
    # expire, so it is refused unless the caller insists. Anything else worth knowing (no
    # runner yet, the able one not seen lately) is the queued run's `waiting`.
    servable, why = runners.availability(session, run.requires)
    if not servable and not anyway:
        session.rollback()
        raise Invalid(f"no runner can take this run: {why}; send queue_anyway: true to "
                      "queue it all the same", "requires")
    session.commit()
    return jsonify(run_json(run, full=True)), 201, {"Location": f"/runs/{run.id}"}


@bp.get("/runs/<int:run_id>")
def get_run(run_id: int):
    return jsonify(run_json(runs.get(get_session(), run_id), full=True))


@bp.post("/runs/<int:run_id>/cancel")
def cancel_run(run_id: int):
    session = get_session()
    run = runs.cancel(session, runs.get(session, run_id), actor=author())
    session.commit()
    return jsonify(run_json(run, full=True))


@bp.post("/runs/<int:run_id>/rerun")
def rerun_run(run_id: int):
    session = get_session()
    run = runs.rerun(session, runs.get(session, run_id), actor=author())
    session.commit()
    return jsonify(run_json(run, full=True)), 201, {"Location": f"/runs/{run.id}"}


@bp.get("/runs/<int:run_id>/logs")
def run_logs(run_id: int):
    run = runs.get(get_session(), run_id)
    offset = int_arg("offset", 0, 0, 2**62)
    text, next_offset = run_files.read_log(Path(current_app.config["DATA_DIR"]), run, offset)
    return jsonify(data=text, offset=next_offset, size=run.log_size,
                   truncated=run.log_size > run_files.MAX_LOG_BYTES,
                   done=run.status in runs.TERMINAL)


@bp.get("/runs/<int:run_id>/metrics")
def run_metrics(run_id: int):
    run = runs.get(get_session(), run_id)
    query = sa.select(Metric.key, Metric.step, Metric.value).where(Metric.run_id == run.id)
    if request.args.get("key"):
        query = query.where(Metric.key == request.args["key"])
    series: dict[str, list] = {}
    for key, step, value in get_session().execute(query.order_by(Metric.key, Metric.step)):
        series.setdefault(key, []).append([step, value])
    return jsonify(metrics=series)


@bp.get("/runs/<int:run_id>/artifacts/<name>")
def run_artifact(run_id: int, name: str):
    row, path = run_files.find_artifact(Path(current_app.config["DATA_DIR"]), get_session(),
                                        run_id, name)
    response = send_file(path, mimetype=row.content_type, as_attachment=False,
                         download_name=name)
    response.headers["Content-Security-Policy"] = INERT_CSP  # an SVG chart runs nothing
    return response


@bp.get("/runs/<int:run_id>/trace.json")
def run_trace(run_id: int):
    """The run's events as a Chrome Trace Event file (app/journal/views/trace.py)."""
    session = get_session()
    run = runs.get(session, run_id)
    found = rank_events.run_events(Path(current_app.config["DATA_DIR"]), session, run.id)
    if found is None:
        raise NotFound(f"run {run.id} logged no events")
    other = {"run_id": run.id, "experiment": run.experiment, "status": run.status,
             "params": run.params, "strategies": list(found.strategies),
             "url": f"/runs/{run.id}"}
    key = ("trace.json", json.dumps(other, sort_keys=True, default=str))
    body = found.derived(key, lambda: json.dumps(trace.trace(found, other)))
    response = current_app.response_class(body, mimetype="application/json")
    response.headers["Content-Disposition"] = f'attachment; filename="run-{run.id}-trace.json"'
    return response


@bp.get("/compare")
def compare_runs():
    raw = request.args.get("ids", "")
    try:
        ids = [int(x) for x in raw.split(",") if x.strip()]
    except ValueError:
        raise Invalid("ids is a comma-separated list of run ids", "ids") from None
    if not 2 <= len(ids) <= run_query.MAX_COMPARE:
        raise Invalid(f"compare two to {run_query.MAX_COMPARE} runs", "ids")
    if any(not 0 < i < 2**63 for i in ids):
        raise Invalid("ids are run ids (positive integers)", "ids")
    session = get_session()
    by_id = {r.id: r for r in session.scalars(sa.select(Run).where(Run.id.in_(ids)))}
    for i in ids:
        if i not in by_id:
            raise NotFound(f"no run {i}")
    found = [by_id[i] for i in ids]
    details = full_details(session, found)
    return jsonify(runs=[run_json(r, full=True, details=details) for r in found],
                   differing_params=sorted(runs.differing_params(found)))


# -- schedules ----------------------------------------------------------------------------


@bp.get("/schedules/preview")
def preview_schedule():
    """What a schedule's "when" means before it is saved: the crontab line a phrase becomes
    and its next fires (the schedule form shows them while the owner types)."""
    text, timezone = request.args.get("cron", ""), request.args.get("timezone", "UTC")
    if len(text) > 200 or len(timezone) > 64:
        raise Invalid("cron and timezone are short texts", "cron")
    cron = cron_phrases.to_cron(text)
    fires = schedules.allowed_fires(cron, timezone)[:5]
    return jsonify(cron=cron, timezone=timezone,
                   next_fires=[iso(t.astimezone(dt.UTC).replace(tzinfo=None)) for t in fires],
                   next_fires_local=[t.isoformat() for t in fires],
                   next_fires_text=[t.strftime("%a %d %b %H:%M") for t in fires])


@bp.get("/schedules")
def list_schedules():
    rows = get_session().scalars(sa.select(Schedule).order_by(Schedule.id))
    return jsonify(schedules=[schedule_json(s) for s in rows])


@bp.post("/schedules")
def create_schedule():
    session = get_session()
    schedule = schedules.create(session, json_body())
    session.commit()
    return jsonify(schedule_json(schedule)), 201, {"Location": f"/schedules/{schedule.id}"}


@bp.get("/schedules/<int:schedule_id>")
def get_schedule(schedule_id: int):
    return jsonify(schedule_json(schedules.get(get_session(), schedule_id)))


@bp.put("/schedules/<int:schedule_id>")
def update_schedule(schedule_id: int):
    session = get_session()
    schedule = schedules.update(session, schedules.get(session, schedule_id), json_body())
    session.commit()
    return jsonify(schedule_json(schedule))


@bp.delete("/schedules/<int:schedule_id>")
def delete_schedule(schedule_id: int):
    session = get_session()
    session.delete(schedules.get(session, schedule_id))  # its runs stay, unlinked
    session.commit()
    return "", 204
