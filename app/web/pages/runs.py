"""Run pages: the catalogue, the new-run form, the run list, one run, compare.

Views parse the request, call app/journal/runs.py (the one state machine) and render. The live parts
of the run page come from app/static/runs.js polling the JSON API; every page works
without it.
"""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from flask import abort, current_app, redirect, render_template, request, url_for

from app.db import get_session
from app.errors import Invalid
from app.journal import catalogue as known
from app.journal import run_files, run_metrics, run_query, runners, runs, trends
from app.journal.views import cards
from app.models import Run, Schedule
from app.web.access import author, require_owner
from app.web.pages import learning
from app.web.pages import run_summary as summary
from app.web.pages.blueprints import experiments as bp
from app.web.pages.param_forms import ParamForm, fmt, unknown_params
from app.web.parsing import int_arg
from base import statuses
from jobs.lab.catalogue import registry

PAGE = 50
LOG_TAIL = 16 * 1024  # bytes of log the page starts with; the script fetches the rest
MAX_COMPARE = run_query.MAX_COMPARE


@bp.app_template_global("experiment_title")
def experiment_title(name: str) -> str:
    return cards.title_of(name)


bp.add_app_template_filter(fmt, "param")
bp.add_app_template_global(summary.duration, "run_duration")
bp.add_app_template_global(summary.progress_text, "progress_text")
# Templates (and, through the run page's data attributes, runs.js) test a run's status
# against base/statuses.py's words, never a spelling of their own.
bp.add_app_template_global(statuses, "statuses")


def is_id(text: str) -> bool:
    return text.isdecimal() and len(text) <= 12


def experiment_or_404(name: str) -> dict:
    try:
        return known.describe(get_session(), name)
    except registry.UnknownExperiment:
        abort(404, description=f"there is no experiment called {name!r}")


def run_or_404(run_id: int) -> Run:
    return runs.get(get_session(), run_id)  # NotFound → the 404 page


# -- the catalogue and the form -----------------------------------------------------------


@bp.get("/experiments")
def catalogue():
    session = get_session()
    latest_ids = sa.select(sa.func.max(Run.id)).group_by(Run.experiment)
    latest = {r.experiment: r for r in session.scalars(sa.select(Run).where(
        Run.id.in_(latest_ids)))}
    experiments = registry.catalogue()
    by_name = {e["name"]: e for e in experiments}
    return render_template(
        "experiments/catalogue.html", experiments=experiments, latest=latest,
        own=list(known.owned(session).values()), broken=known.broken(session),
        guides=learning.GUIDES, path=learning.path(experiments),
        further=[by_name[n] for n in learning.GOING_FURTHER if n in by_name],
        machine=[by_name[n] for n in learning.THE_MACHINE if n in by_name])


def form_page(spec: dict, form: ParamForm, *, message: str = "", source: Run | None = None,
              first: bool = False, status: int = 200, offer_anyway: bool = False):
    return render_template("experiments/new_run.html", spec=spec, form=form,
                           message=message, source=source, first=first,
                           guide=learning.guide(spec["name"]), offer_anyway=offer_anyway), status


@bp.get("/experiments/<name>/run")
def new_run(name: str):
    require_owner()
    spec = experiment_or_404(name)
    source = None
    if is_id(request.args.get("from", "")):
        source = get_session().get(Run, int(request.args["from"]))
    values = source.params if source is not None and source.experiment == name else None
    first = values is None and request.args.get("first") == "1" and name in learning.GUIDES
    if first:  # the catalogue's suggested first run: small, seconds on a CPU
        values = learning.first_run(name)
    if values is not None or not any(k.startswith("param.") for k in request.args):
        return form_page(spec, ParamForm.initial(spec, values), source=source, first=first)
    # ?param.<name>=value (the calculator's "Run this here"): typed as the form's POST is,
    # then checked by the registry; a bad value is shown as the form's error
    asked, _ = ParamForm.parse(spec, request.args)
    given = {f.name: f.value for f in asked.fields if f.input_name in request.args}
    form = ParamForm.initial(spec, given)
    form.errors = {k: v for k, v in asked.errors.items() if k in given}
    unknown = unknown_params(spec, request.args)
    if unknown:
        return form_page(spec, form, message=unknown, status=422)
    if not form.errors:
        try:
            known.validate(get_session(), name, given)
        except registry.ParamError as exc:
            form.errors[exc.param] = exc.message
    if form.errors:
        field, why = next(iter(form.errors.items()))
        return form_page(spec, form, message=f"{field}: {why}", status=422)
    return form_page(spec, form)


@bp.post("/experiments/<name>/run")
def create_run(name: str):
    spec = experiment_or_404(name)
    form, params = ParamForm.parse(spec, request.form)
    unknown = unknown_params(spec, request.form)
    if unknown:
        return form_page(spec, form, message=unknown, status=422)
    if form.errors:
        return form_page(spec, form, message=next(iter(form.errors.values())), status=422)
    session = get_session()
    nodes = request.form.get("nodes", "").strip() or "1"  # hosts that run it together
    try:
        run = runs.create(session, name, params, actor=author(),
                          nodes=int(nodes) if nodes.isdecimal() and len(nodes) < 4 else nodes)
    except Invalid as exc:
        if exc.field in form.field_names() or exc.field == "nodes":
            form.errors[exc.field] = exc.message
        return form_page(spec, form, message=exc.message, status=422)
    servable, why = runners.availability(session, run.requires)
    if not servable and request.form.get("queue_anyway") != "on":
        # Queued, it would wait a day and expire: say so now, and let the owner insist
        # (a runner with that hardware may be about to start).
        session.rollback()
        form.errors.setdefault("device", why)
        return form_page(spec, form, message=f"no runner can take this run: {why}",
                         status=422, offer_anyway=True)
    session.commit()
    return redirect(url_for("experiments.run_page", run_id=run.id), code=303)


# -- the run list -------------------------------------------------------------------------


LIST_ARGS = ("status", "experiment", "week", "schedule", "params", "sort", "order")


def _filters() -> dict[str, str]:
    return {key: request.args.get(key, "").strip() for key in LIST_ARGS}


@bp.get("/runs")
def run_list():
    """Runs newest first or sorted by a result, filtered (app/journal/run_query.py: the
    same arguments as GET /api/v1/runs); paged by keyset."""
    filters = _filters()
    named = {k: request.args.getlist(k) for k in request.args if k.startswith("param.")}
    error, rows, cursor, found = "", [], "", None
    try:
        found = run_query.listing(request.args, current_app.config["TIMEZONE"])
        if filters["experiment"]:
            known.check_filter(get_session(), filters["experiment"])
        if found.sort:
            known.check_sort(get_session(), found.sort)
        # the API's bound; ignored, a limit typed wrong would show a page of another size
        rows, cursor = found.page(get_session(), int_arg("limit", PAGE, 1, 500))
    except Invalid as exc:
        error = exc.message
    schedule = None
    if is_id(filters["schedule"]):
        schedule = get_session().get(Schedule, int(filters["schedule"]))
    sort = found.sort if found else ""
    sorts = dict(run_metrics.LABELS)
    if filters["sort"] and filters["sort"] not in sorts:
        sorts[filters["sort"]] = filters["sort"]  # 1f1b.step_time_s from a link
    paged = bool(request.args.get("before") or request.args.get("cursor"))
    body = render_template(
        "experiments/runs.html", rows=rows, filters=filters, error=error,
        cursor=cursor, paged=paged, statuses=statuses.STATUSES,
        experiments=[*registry.EXPERIMENTS, *known.owned(get_session())],
        schedule=schedule, filtered=any(filters.values()) or bool(named), sort=sort,
        sorts=sorts, order=found.order if found else "", shown=run_metrics.shown,
        sort_label=sorts.get(sort, sort),
        active={**{k: v for k, v in filters.items() if v}, **named,
                **({"limit": request.args["limit"]} if "limit" in request.args else {})},
    )
    return body, 400 if error else 200


# -- one run ------------------------------------------------------------------------------


def log_tail(run: Run) -> tuple[str, int]:
    """The end of the run's log, starting at a line break, and the offset it ends at."""
    start = max(0, run.log_size - LOG_TAIL)
    text, end = run_files.read_log(Path(current_app.config["DATA_DIR"]), run, start)
    if start and "\n" in text:
        text = text.split("\n", 1)[1]
    return text, end


@bp.get("/runs/<int:run_id>")
def run_page(run_id: int):
    session = get_session()
    run = run_or_404(run_id)
    try:
        spec = known.describe(session, run.experiment)
    except registry.UnknownExperiment:  # an own experiment no runner reports any more
        spec = {}
    log, log_end = log_tail(run)
    # ?views=0: the page without the sharding, timeline and traffic views, for a slow link
    views = request.args.get("views", "1") != "0"
    return render_template(
        "experiments/run.html", run=run, spec=spec, events=runs.events(session, run),
        title=cards.run_title(run),
        views=views,
        reruns=list(session.scalars(sa.select(Run.id).where(Run.parent_id == run.id)
                                    .order_by(Run.id))),
        artifacts=run_files.artifacts(session, run),
        schedule=session.get(Schedule, run.schedule_id) if run.schedule_id else None,
        card=cards.card(run, current_app.config["TIMEZONE"], trends.trend(session, run)),
        checks=summary.checks(run),
        problem=summary.result_problem(run),
        extras=summary.progress_extras(run), log=log, log_end=log_end,
        unfinished=run.status in statuses.UNFINISHED, cancellable=run.status in statuses.UNFINISHED
        and run.cancel_requested_at is None,
        waiting=runners.availability(session, run.requires or {})[1]
        if run.status == runs.QUEUED else "",
    )


@bp.get("/runs/<int:run_id>/cancel")
def confirm_cancel(run_id: int):
    require_owner()
    run = run_or_404(run_id)
    return render_template("experiments/cancel.html", run=run,
                           unfinished=run.status in statuses.UNFINISHED)


@bp.post("/runs/<int:run_id>/cancel")
def cancel_run(run_id: int):
    session = get_session()
    run = run_or_404(run_id)
    runs.cancel(session, run, actor=author())  # BadState (409) when there is nothing to stop
    session.commit()
    return redirect(url_for("experiments.run_page", run_id=run.id), code=303)


@bp.post("/runs/<int:run_id>/rerun")
def rerun(run_id: int):
    session = get_session()
    new = runs.rerun(session, run_or_404(run_id), actor=author())
    session.commit()
    return redirect(url_for("experiments.run_page", run_id=new.id), code=303)


# -- compare ------------------------------------------------------------------------------


def compare_ids() -> list[int]:
    """?ids=1,2 from a link, or ?ids=1&ids=2 from the run list's checkboxes."""
    raw = ",".join(request.args.getlist("ids"))
    parts = [p.strip() for p in raw.split(",") if p.strip()]
    if not all(is_id(p) for p in parts):
        raise Invalid("ids is a list of run ids, e.g. ?ids=3,5", "ids")
    ids = list(dict.fromkeys(int(p) for p in parts))
    if not 2 <= len(ids) <= MAX_COMPARE:
        raise Invalid(f"pick two to {MAX_COMPARE} runs to compare (got {len(ids)})", "ids")
    return ids


@bp.get("/runs/compare")
def compare():
    ids = compare_ids()
    session = get_session()
    group = summary.oldest_first([runs.get(session, i) for i in ids])
    differing = runs.differing_params(group)
    names = sorted(set().union(*(r.params.keys() for r in group)),
                   key=lambda k: (k not in differing, k))
    metrics = summary.side_by_side([summary.headline(r) for r in group])
    env_keys = sorted(set().union(*((r.environment or {}).keys() for r in group)))
    env_differs = {k for k in env_keys
                   if len({repr((r.environment or {}).get(k)) for r in group}) > 1}
    return render_template(
        "experiments/compare.html", group=group, names=names, differing=differing,
        metrics=metrics, env_keys=env_keys, env_differs=env_differs,
    )
