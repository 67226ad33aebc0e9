"""Reading what a JSON request sent: the body as an object, integer query arguments in
bounds. A malformed request is an Invalid (422) naming what is wrong, never a 500."""

from __future__ import annotations

import json
import re

from flask import request

from app.errors import Invalid

INT64 = 2**63
# "\ud800" unpaired: json reads it into a str that no UTF-8 writer downstream (SQLite, a
# file, a page) can encode. Only a body with such an escape is walked to find out.
SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


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
        # Strict UTF-8, as JSON between systems is: json.loads of the bytes would also take
        # UTF-16, and a surrogate's own bytes (surrogatepass), as text.
        text = request.get_data(cache=True).decode("utf-8-sig")
        data = json.loads(text, parse_constant=_no_constant, parse_float=_finite,
                          parse_int=_int64)
    except (ValueError, RecursionError) as exc:
        raise Invalid(f"the body is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise Invalid("the body must be a JSON object")
    if SURROGATE_ESCAPE.search(text) and not _encodable(data):
        raise Invalid("the body holds a lone UTF-16 surrogate (\\ud800 to \\udfff), "
                      "which is not text")
    return data


def _encodable(data) -> bool:
    try:
        json.dumps(data, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        return False
    return True


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
