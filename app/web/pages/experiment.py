"""One experiment's page, /experiments/<name>: the address a person types or shares. What
it teaches (its guide, diagram and description), its parameters with their defaults and
bounds (the lab's catalogue, torch-free, or an own experiment's declaration), the
suggested first run, its recent runs with their headline numbers, and the trend pages of
the parameter sets it was run with; for an owner, the buttons that run and schedule it
(the form is /experiments/<name>/run). A viewer reads the same page without them.
"""

from __future__ import annotations

import re

import sqlalchemy as sa
from flask import abort, render_template

from app.db import get_session
from app.journal import run_metrics, run_query
from app.models import Schedule
from app.web.pages import learning
from app.web.pages.blueprints import experiments as bp
from app.web.pages.param_forms import ParamForm
from app.web.pages.runs import experiment_or_404

# The lab's names and an own experiment's (jobs/lab/catalogue/own.py NAME_RE): anything
# else is no experiment, answered before the catalogue is asked.
NAME_RE = re.compile(r"[a-z][a-z0-9_]{0,39}")
RECENT_RUNS = 10
PARAMETER_SETS = 5
SHOWN_PARAMS = 6  # of a parameter set, the ones that differ from the defaults


@bp.get("/experiments/<name>")
def experiment_page(name: str):
    if not NAME_RE.fullmatch(name):
        abort(404, description="an experiment's name is lower-case letters, digits and _, "
                               "starting with a letter")
    spec = experiment_or_404(name)
    session = get_session()
    defaults = {k: p.get("default") for k, p in spec["params"].items()}
    guide = learning.guide(name)
    first = learning.first_run(name) if guide else {}
    sets = [(row, differing(row.params, defaults))
            for row in run_query.compared_sets(session, name, PARAMETER_SETS)]
    schedules = list(session.scalars(sa.select(Schedule).where(Schedule.experiment == name)
                                     .order_by(Schedule.id)))
    return render_template(
        "experiments/experiment.html", spec=spec, guide=guide,
        fields=ParamForm.initial(spec).fields,
        first=[(k, v) for k, v in first.items() if v != defaults.get(k)],
        recent=run_query.recent(session, name, RECENT_RUNS), sets=sets,
        schedules=schedules, labels=run_metrics.LABELS, shown=run_metrics.shown,
        shown_params=SHOWN_PARAMS)


def differing(params, defaults: dict) -> list[tuple[str, object]]:
    """A parameter set as a person tells it from the others: what differs from the
    defaults (the sampling ones aside, which do not change what is measured)."""
    if not isinstance(params, dict):
        return []
    return [(k, v) for k, v in sorted(params.items())
            if k not in run_metrics.SAMPLING and v != defaults.get(k)]
