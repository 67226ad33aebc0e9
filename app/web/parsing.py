"""Reading what a JSON request sent: the body as an object, integer query arguments in
bounds. A malformed request is an Invalid (422) naming what is wrong, never a 500."""

from __future__ import annotations

from flask import request

from app.errors import Invalid


def json_body() -> dict:
    if not request.is_json:
        raise Invalid("send a JSON object with Content-Type: application/json")
    data = request.get_json(silent=True)
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
