"""/api/v1/calculator: the what-if calculator's answer as JSON (docs/EXPERIMENTS.md,
"What-if calculator"). GET takes the inputs as query arguments, so viewers (who may only
read) and the calculator page's script can ask; POST takes the same inputs as a JSON
object. The numbers come from the lab's cost model (jobs/lab/predict/estimate.py)."""

from __future__ import annotations

from flask import jsonify, request

from app.db import get_session
from app.errors import TooLarge
from app.journal import calibrations
from app.web.api.blueprint import bp
from app.web.parsing import json_body
from jobs.lab.predict import whatif

MAX_BODY = 16 * 1024  # a few dozen short fields


@bp.get("/calculator")
def calculator_get():
    # each field's last value: a form's unticked checkbox sends only its hidden "false"
    raw = {name: values[-1] for name, values in request.args.lists()}
    return jsonify(calibrations.calculate(get_session(), raw))


@bp.post("/calculator")
def calculator_post():
    if (request.content_length or 0) > MAX_BODY:
        raise TooLarge(f"body: at most {MAX_BODY} bytes", "body")
    return jsonify(calibrations.calculate(get_session(), json_body()))


@bp.get("/calculator/gpus")
def calculator_gpus():
    """The GPUs a calculation may name: the presets and the runners' calibrations."""
    presets = [{"gpu": key, "label": g["label"]} for key, g in whatif.GPUS.items()]
    return jsonify(gpus=presets + calibrations.offered(get_session()))
