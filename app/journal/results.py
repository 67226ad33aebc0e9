"""What the server accepts from a runner as a run's result (the lab's result.json) and its
metrics: the fields the cards and run pages read must have the types they read them as,
numbers must be numbers (JSON itself refuses NaN and Infinity at the door,
app/web/parsing.py), and the whole is bounded. A wrong type is refused with a 422 naming
the field, so nothing a runner sends can break a page later.

Unknown fields pass: the lab adds measurements before the pages learn to show them.
"""

from __future__ import annotations

import json

from app.errors import Invalid

MAX_RESULT_BYTES = 4 * 1024 * 1024
MAX_DEPTH = 20
INT64 = 2**63

NUM, TEXT, FLAG, DICT, LIST = "number", "text", "true/false", "an object", "a list"

# The shape the pages read: a field named here must have this type (or be null/absent).
STRATEGY = {
    "strategy": TEXT, "label": TEXT, "tokens_per_s": NUM,
    "correctness": {"passed": FLAG, "reason": TEXT, "max_grad_abs_error": NUM,
                    "max_param_abs_error": NUM, "loss_abs_error": NUM, "max_rel_error": NUM,
                    "steps_checked": NUM},
    "step_time_s": {"median": NUM, "p10": NUM, "p90": NUM},
    "prediction": {"step_time_s": NUM, "dominant": TEXT},
    "ratios": {"step_time": NUM},
    "mfu": {"value": NUM, "peak_name": TEXT},
    "comm": {"all_exact": FLAG},
}
RESULT = {
    "schema_version": NUM, "experiment": TEXT, "status": TEXT, "environment": DICT,
    "strategies": [STRATEGY],
    "fits": DICT, "table": [DICT],
    "peak_flops": NUM, "copy_bandwidth_Bps": NUM, "tokens_per_s": NUM,
    "achieved_flops": NUM, "mfu": NUM,
    "title": TEXT, "reports": DICT, "reported": {"scalars": DICT, "series": DICT,
                                                 "tables": DICT},
}
FIT = {"alpha_s": NUM, "busbw_Bps": NUM, "fallback": TEXT}
ROW = {"op": TEXT, "busbw_Bps": NUM, "flops_per_s": NUM, "fraction_of_bound": NUM,
       "bound_by": TEXT}


def check_result(result) -> dict:
    if not isinstance(result, dict):
        raise Invalid("result must be a JSON object", "result")
    if len(json.dumps(result)) > MAX_RESULT_BYTES:
        raise Invalid(f"result is larger than {MAX_RESULT_BYTES // (1024 * 1024)} MB", "result")
    _depth(result, 0)
    _shape(result, RESULT, "result")
    for op, fit in (result.get("fits") or {}).items():
        _shape(fit, FIT, f"result.fits.{op}")
    for i, row in enumerate(result.get("table") or []):
        _shape(row, ROW, f"result.table[{i}]")
    reason = result.get("reason")
    if reason is not None and not isinstance(reason, (str, dict)):
        raise Invalid("result.reason must be text or an object", "result.reason")
    if isinstance(reason, dict):
        _shape(reason, {"code": TEXT, "message": TEXT}, "result.reason")
    return result


def check_metric(point, where: str) -> dict:
    """{key: text, step: whole number ≥ 0 in 64 bits, value: a number}."""
    if not (isinstance(point, dict) and isinstance(point.get("key"), str)
            and 0 < len(point["key"]) <= 100 and _is(point.get("step"), "int")
            and 0 <= point["step"] < INT64 and _is(point.get("value"), NUM)):
        raise Invalid(f"{where}: each point is {{key: text, step: a whole number from 0, "
                      "value: a number}", "points")
    return point


def _is(value, kind: str) -> bool:
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == NUM:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, {TEXT: str, FLAG: bool, DICT: dict, LIST: list}[kind])


def _shape(value, spec, where: str) -> None:
    if value is None:
        return
    if isinstance(spec, str):
        if not _is(value, spec):
            raise Invalid(f"{where} must be {spec}, not {type(value).__name__}", where)
    elif isinstance(spec, list):
        if not isinstance(value, list):
            raise Invalid(f"{where} must be a list", where)
        for i, item in enumerate(value):
            _shape(item, spec[0], f"{where}[{i}]")
    else:
        if not isinstance(value, dict):
            raise Invalid(f"{where} must be an object", where)
        for name, inner in spec.items():
            _shape(value.get(name), inner, f"{where}.{name}")


def _depth(value, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise Invalid(f"result is nested more than {MAX_DEPTH} deep", "result")
    children = value.values() if isinstance(value, dict) else value if isinstance(
        value, list) else ()
    for child in children:
        _depth(child, depth + 1)
