"""The sharding view's template globals: a run page's view of its run, and the new-run
form's view of the parameters it shows (every strategy the experiment offers, to compare).
The HTML is app/journal/views/sharding.py's; templates/experiments/_sharding.html places it."""

from __future__ import annotations

from markupsafe import Markup

from app.journal.views import sharding
from app.models import Run
from app.web.pages.blueprints import experiments as bp
from app.web.pages.param_forms import ParamForm


@bp.app_template_global("sharding_of_run")
def sharding_of_run(run: Run) -> Markup:
    """The view of `run` ("" for an experiment without a model, or a result that does not
    describe one)."""
    return Markup(sharding.for_run(run.experiment, run.params, run.result))


@bp.app_template_global("sharding_of_form")
def sharding_of_form(form: ParamForm) -> Markup:
    """The view of the values `form` shows (the defaults, or a run's being changed)."""
    values = {f.name: f.value for f in form.fields}
    return Markup(sharding.for_params(form.experiment, values))
