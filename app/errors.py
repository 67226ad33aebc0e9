"""Every refusal the server can make, and the one place that turns one into a response:
JSON under /api (and /healthz), a page elsewhere. Bad input is always a clear 4xx; nothing
a user or a runner sends may produce a 500.

The classes sit at the bottom of the layers, so the notebook, the journal and the web
raise them without importing each other. A refusal carries its HTTP status, a stable
machine-readable code, a message for people, and optionally the field it is about.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

# The responses' half needs Flask, and imports it where it runs: the classes are raised in
# processes that serve no page (the scheduler), which never load Flask.
if TYPE_CHECKING:
    from flask import Flask
    from werkzeug.exceptions import HTTPException


class Refusal(Exception):
    status = 400
    code = "bad_request"

    def __init__(self, message: str, field: str | None = None, **details):
        super().__init__(message)
        self.message = message
        self.field = field
        self.details = details  # extra keys for the JSON error (e.g. a log gap's size)


class Invalid(Refusal):
    status = 422
    code = "invalid"


def refuse_unknown(data: dict, allowed) -> None:
    """Invalid naming the first field of `data` that is not in `allowed`: a typo in a
    field name is an error, never silently ignored."""
    unknown = sorted(set(data) - set(allowed))
    if unknown:
        raise Invalid(f"unknown field {unknown[0]!r}", unknown[0])


class NotFound(Refusal):
    status = 404
    code = "not_found"


class BadQuery(Refusal):
    """A search we cannot run; the message is shown to the user as it is."""

    code = "bad_query"


class TooLarge(Invalid):
    status = 413
    code = "too_large"


class Unsupported(Invalid):
    status = 415
    code = "unsupported_media_type"


class Conflict(Refusal):
    """A save based on an older revision than the entry now has, whose changes could not
    be merged by themselves. `current` is a snapshot of the entry as it is (the session
    rolls back after this; the merge view needs it); `conflicts` lists what both sides
    changed differently, and `offered` is the merge that keeps both sides."""

    status = 409
    code = "conflict"

    def __init__(self, message: str, current: dict, conflicts: list | None = None,
                 offered: dict | None = None):
        extra = {"conflicts": conflicts, "offered": offered} if conflicts else {}
        super().__init__(message, current=current, **extra)
        self.current = current
        self.conflicts = conflicts or []
        self.offered = offered


class BadState(Refusal):
    """The run is not in a state that allows this (e.g. cancelling a finished run)."""

    status = 409
    code = "bad_state"


class LogGap(BadState):
    """A log chunk starts past what we have: the runner resends from `size`."""

    code = "log_gap"

    def __init__(self, size: int, offset: int):
        super().__init__(f"log gap: have {size} bytes, chunk starts at {offset}", size=size)


class Stale(Refusal):
    """A runner spoke for a lease it no longer holds: it must stop its job."""

    status = 409
    code = "stale_lease"


class Denied(Refusal):
    """Who is asking may not do this (403), or could not be told apart from nobody (401).
    `seen_as` tells the person who we took them for, so a refusal can be acted on."""

    status = 403
    code = "forbidden"

    def __init__(self, status: int, message: str, seen_as: str | None = None):
        super().__init__(message, **({"seen_as": seen_as} if seen_as else {}))
        self.status = status
        self.code = "unauthorized" if status == 401 else "forbidden"
        self.seen_as = seen_as


# -- responses ----------------------------------------------------------------------------


def wants_json() -> bool:
    from flask import request

    return request.path.startswith("/api/") or request.path == "/healthz"


def error_response(status: int, code: str, message: str, **extra):
    from flask import g, jsonify, render_template

    if wants_json():
        body = {"error": {"code": code, "message": message, **extra}}
        return jsonify(body), status
    return render_template("error.html", status=status, code=code, message=message,
                           identity=g.get("identity"), **extra), status


def init_app(app: Flask) -> None:
    from werkzeug.exceptions import HTTPException

    @app.errorhandler(Refusal)
    def _refusal(exc: Refusal):
        extra = {"field": exc.field} if exc.field else {}
        extra.update(exc.details)
        return error_response(exc.status, exc.code, exc.message, **extra)

    @app.errorhandler(HTTPException)
    def _http(exc: HTTPException):
        code = (exc.name or "error").lower().replace(" ", "_")
        body, status = error_response(exc.code or 500, code, _message(exc))
        methods = getattr(exc, "valid_methods", None)
        return body, status, ({"Allow": ", ".join(methods)} if methods else {})


def _message(exc: HTTPException) -> str:
    """The refusal in our words. A view that aborts says why; where the framework itself
    refuses (no such page, wrong method) its stock sentence is replaced by one that names
    the path."""
    from flask import request

    if exc.description and exc.description != type(exc).description:
        return exc.description
    if exc.code == 404:
        return f"there is no page at {request.path}; it may have moved, or the link is mistyped"
    if exc.code == 405:
        allowed = ", ".join(sorted(m for m in getattr(exc, "valid_methods", None) or []
                                   if m not in ("HEAD", "OPTIONS")))
        return (f"{request.path} does not take a {request.method} request"
                + (f" (it takes {allowed})" if allowed else ""))
    return exc.description or exc.name
