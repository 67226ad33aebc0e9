"""Reading what a JSON request sent: the body as an object, integer query arguments in
bounds. A malformed request is an Invalid (422) naming what is wrong, never a 500."""

from __future__ import annotations

import json

from flask import request

from app.errors import Invalid

INT64 = 2**63


def _no_constant(name: str):
    # Python's json reads NaN and Infinity, which no JSON parser downstream accepts (the
    # run page's script, a strict client): refused at the door, they are never stored.
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"{text} is too large a number")
    return value


def _int64(text: str) -> int:
    value = int(text)
    if not -INT64 <= value < INT64:
        raise ValueError(f"{text[:30]} does not fit in 64 bits")
    return value


def json_body() -> dict:
    if not request.is_json:
        raise Invalid("send a JSON object with Content-Type: application/json")
    try:
        data = json.loads(request.get_data(cache=True), parse_constant=_no_constant,
                          parse_float=_finite, parse_int=_int64)
    except (ValueError, RecursionError) as exc:
        raise Invalid(f"the body is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise Invalid("the body must be a JSON object")
    return data


def int_arg(name: str, default: int, low: int, high: int) -> int:
    raw = request.args.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise Invalid(f"{name} must be an integer", name) from None
    if not low <= value <= high:
        raise Invalid(f"{name} must be between {low} and {high}", name)
    return value
