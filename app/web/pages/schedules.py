"""Schedule pages: the list with a create form, one schedule with its edit form, delete.

The form holds the schedule's own fields and the experiment's generated parameter form.
Parameters belong to one experiment, so when the experiment select changes, the form comes
back with that experiment's defaults to review (a hidden `params_for` says which experiment
the submitted parameters were for) — nothing is saved until they match.
"""

from __future__ import annotations

import datetime as dt
import functools
import zoneinfo
from zoneinfo import ZoneInfo

import sqlalchemy as sa
from flask import current_app, redirect, render_template, request, url_for

from app.db import get_session
from app.errors import Invalid
from app.journal import catalogue as known
from app.journal import runs, schedules
from app.models import Run, Schedule
from app.web.access import require_owner
from app.web.pages.blueprints import experiments as bp
from app.web.pages.param_forms import ParamForm, ScheduleDraft, unknown_params
from jobs.lab.catalogue import registry

RECENT_FIRES = 12
FIELD_FOR = {"misfire_grace_s": "misfire_grace_hours"}  # the page asks for hours


@functools.cache
def time_zones() -> list[str]:
    return sorted(z for z in zoneinfo.available_timezones() if "/" in z or z == "UTC")


def in_zone(moment: dt.datetime | None, zone: str) -> str:
    """A stored UTC time (naive) or an aware one, shown in the schedule's zone."""
    if moment is None:
        return "never"
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    try:
        moment = moment.astimezone(ZoneInfo(zone))
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        pass
    return moment.strftime("%a %Y-%m-%d %H:%M %Z")


bp.add_app_template_filter(in_zone, "in_zone")


def upcoming(schedule: Schedule, count: int = 5) -> list[dt.datetime]:
    try:
        return schedules.next_fires(schedule.cron, schedule.timezone, count)
    except Invalid:
        return []


def form_context(draft: ScheduleDraft, params: ParamForm, errors: dict, notice: str = ""):
    experiments = {e["name"]: e for e in known.catalogue(get_session())}
    return {"draft": draft, "params": params, "errors": errors, "notice": notice,
            "experiments": experiments, "zones": time_zones()}


def described(name: str, params: dict | None = None) -> dict:
    """The experiment as the catalogue has it; for a schedule of an own experiment that no
    runner reports any more, its stored parameters as they are, so the page still opens
    (saving it is refused until a runner reports the experiment again)."""
    try:
        return known.describe(get_session(), name)
    except registry.UnknownExperiment:
        kinds = {bool: "bool", int: "int", float: "float", list: "str_list"}
        return {"name": name, "title": name, "params": {
            k: {"type": kinds.get(type(v), "str"), "default": v, "description": ""}
            for k, v in (params or {}).items()}}


def read_form() -> tuple[ScheduleDraft, ParamForm, dict | None, dict, str]:
    """(draft, param form, data for schedules.create/update or None, errors, notice)."""
    draft = ScheduleDraft.from_form(request.form)
    experiments = {e["name"]: e for e in known.catalogue(get_session())}
    if draft.experiment not in experiments:
        fallback = request.form.get("params_for", "")
        fallback = fallback if fallback in experiments else next(iter(experiments))
        return (draft, ParamForm.initial(experiments[fallback]), None,
                {"experiment": f"unknown experiment {draft.experiment!r}"}, "")
    spec = experiments[draft.experiment]
    if request.form.get("params_for") != draft.experiment:
        notice = (f"Parameters now show the defaults of “{spec['title']}”. Review them, "
                  "then save.")
        return draft, ParamForm.initial(spec), None, {}, notice
    params_form, params = ParamForm.parse(spec, request.form)
    data, errors = draft.data(params)
    errors.update({k: v for k, v in params_form.errors.items()})
    unknown = unknown_params(spec, request.form)
    if unknown:
        errors["form"] = unknown
    return draft, params_form, (None if errors else data), errors, ""


def place_error(exc: Invalid, params_form: ParamForm, errors: dict) -> None:
    name = exc.field or "form"
    if name in params_form.field_names():
        params_form.errors[name] = exc.message
    elif name == "misfire_grace_s":
        errors[name] = f"misfire grace is 0 to {schedules.MAX_GRACE_S // 3600} hours"
    else:
        errors[name] = exc.message


# -- the list -----------------------------------------------------------------------------


def list_page(form: dict, status: int = 200):
    session = get_session()
    rows = list(session.scalars(sa.select(Schedule).order_by(Schedule.id)))
    counts = {sid: (total, skipped) for sid, total, skipped in session.execute(
        sa.select(Run.schedule_id, sa.func.count(),
                  sa.func.sum(sa.case((Run.status == runs.SKIPPED, 1), else_=0)))
        .where(Run.schedule_id.is_not(None)).group_by(Run.schedule_id))}
    nexts = {s.id: (upcoming(s, 1) or [None])[0] for s in rows}
    return render_template("experiments/schedules.html", rows=rows, counts=counts,
                           nexts=nexts, per_minute=current_app.config[
                               "SCHEDULED_RUNS_PER_MINUTE"], **form), status


@bp.get("/schedules")
def schedule_list():
    experiments = {e["name"]: e for e in known.catalogue(get_session())}
    experiment = request.args.get("experiment", "")
    if experiment not in experiments:
        experiment = next(iter(experiments))
    draft = ScheduleDraft(experiment=experiment, timezone=current_app.config["TIMEZONE"])
    return list_page(form_context(draft, ParamForm.initial(experiments[experiment]), {}))


@bp.post("/schedules")
def create_schedule():
    draft, params_form, data, errors, notice = read_form()
    if data is None:
        return list_page(form_context(draft, params_form, errors, notice),
                         status=200 if notice else 422)
    session = get_session()
    try:
        schedule = schedules.create(session, data)
    except Invalid as exc:
        place_error(exc, params_form, errors)
        return list_page(form_context(draft, params_form, errors), status=422)
    session.commit()
    return redirect(url_for("experiments.schedule_page", schedule_id=schedule.id), code=303)


# -- one schedule -------------------------------------------------------------------------


def detail_page(schedule: Schedule, form: dict, status: int = 200):
    session = get_session()
    recent = list(session.scalars(sa.select(Run).where(Run.schedule_id == schedule.id)
                                  .order_by(Run.id.desc()).limit(RECENT_FIRES)))
    return render_template("experiments/schedule.html", schedule=schedule,
                           fires=upcoming(schedule), recent=recent,
                           saved=request.args.get("saved") == "1", **form), status


@bp.get("/schedules/<int:schedule_id>")
def schedule_page(schedule_id: int):
    schedule = schedules.get(get_session(), schedule_id)
    form = form_context(ScheduleDraft.of(schedule),
                        ParamForm.initial(described(schedule.experiment, schedule.params),
                                          schedule.params), {})
    return detail_page(schedule, form)


@bp.post("/schedules/<int:schedule_id>")
def update_schedule(schedule_id: int):
    session = get_session()
    schedule = schedules.get(session, schedule_id)
    draft, params_form, data, errors, notice = read_form()
    if data is None:
        return detail_page(schedule, form_context(draft, params_form, errors, notice),
                           status=200 if notice else 422)
    try:
        schedules.update(session, schedule, data)
    except Invalid as exc:  # raised before anything is assigned: the row is unchanged
        place_error(exc, params_form, errors)
        return detail_page(schedule, form_context(draft, params_form, errors), status=422)
    session.commit()
    return redirect(url_for("experiments.schedule_page", schedule_id=schedule.id, saved=1),
                    code=303)


@bp.get("/schedules/<int:schedule_id>/delete")
def confirm_delete_schedule(schedule_id: int):
    require_owner()
    schedule = schedules.get(get_session(), schedule_id)
    return render_template("experiments/schedule_delete.html", schedule=schedule)


@bp.post("/schedules/<int:schedule_id>/delete")
def delete_schedule(schedule_id: int):
    session = get_session()
    session.delete(schedules.get(session, schedule_id))  # its runs stay, unlinked
    session.commit()
    return redirect(url_for("experiments.schedule_list"), code=303)
