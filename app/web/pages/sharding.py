"""The sharding view's template globals: a run page's view of its run, and the new-run
form's view of the parameters it shows (every strategy the experiment offers, to compare).
The HTML is app/journal/views/sharding.py's; templates/experiments/_sharding.html places it.

A run page draws one strategy's panel (?sharding=<strategy>, else the first); the others
are served alone by `sharding_panel`, for app/static/sharding.js to fetch when picked."""

from __future__ import annotations

from flask import abort, request, url_for
from markupsafe import Markup

from app.db import get_session
from app.journal import runs
from app.journal.views import sharding
from app.models import Run
from app.web.pages.blueprints import experiments as bp
from app.web.pages.param_forms import ParamForm


@bp.app_template_global("sharding_of_run")
def sharding_of_run(run: Run) -> Markup:
    """The view of `run` ("" for an experiment without a model, or a result that does not
    describe one)."""
    page = url_for("experiments.run_page", run_id=run.id)
    return Markup(sharding.for_run(run.experiment, run.params, run.result,
                                   shown=request.args.get("sharding"),
                                   links=(page, f"{page}/sharding/")))


@bp.get("/runs/<int:run_id>/sharding/<strategy>")
def sharding_panel(run_id: int, strategy: str):
    """One strategy's panel of a run's sharding view, alone (a fragment of HTML)."""
    run = runs.get(get_session(), run_id)  # NotFound → the 404 page
    html = sharding.panel_of_run(run.experiment, run.params, run.result, strategy)
    if not html:
        abort(404, description=f"run {run_id} has no sharding view of {strategy[:64]!r}")
    return html, 200, {"Content-Type": "text/html; charset=utf-8"}


@bp.app_template_global("sharding_of_form")
def sharding_of_form(form: ParamForm) -> Markup:
    """The view of the values `form` shows (the defaults, or a run's being changed)."""
    values = {f.name: f.value for f in form.fields}
    return Markup(sharding.for_params(form.experiment, values))
