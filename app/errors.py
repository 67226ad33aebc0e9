"""One place that turns a refusal into a response: JSON under /api, a page elsewhere.
Bad input is always a clear 4xx; nothing the user sends may produce a 500."""

from __future__ import annotations

from flask import Flask, g, jsonify, render_template, request
from werkzeug.exceptions import HTTPException

from app.auth import Denied
from app.entries import Conflict, NotebookError
from app.search import QueryError


def wants_json() -> bool:
    return request.path.startswith("/api/") or request.path == "/healthz"


def error_response(status: int, code: str, message: str, **extra):
    if wants_json():
        body = {"error": {"code": code, "message": message, **extra}}
        return jsonify(body), status
    return render_template("error.html", status=status, code=code, message=message,
                           identity=g.get("identity"), **extra), status


def init_app(app: Flask) -> None:
    @app.errorhandler(Denied)
    def _denied(exc: Denied):
        extra = {"seen_as": exc.seen_as} if exc.seen_as else {}
        code = "unauthorized" if exc.status == 401 else "forbidden"
        return error_response(exc.status, code, exc.message, **extra)

    @app.errorhandler(Conflict)
    def _conflict(exc: Conflict):
        return error_response(409, exc.code, exc.message, current=exc.current)

    @app.errorhandler(NotebookError)
    def _notebook(exc: NotebookError):
        extra = {"field": exc.field} if exc.field else {}
        extra.update(getattr(exc, "details", {}))
        return error_response(exc.status, exc.code, exc.message, **extra)

    @app.errorhandler(QueryError)
    def _query(exc: QueryError):
        return error_response(400, "bad_query", str(exc))

    @app.errorhandler(HTTPException)
    def _http(exc: HTTPException):
        code = (exc.name or "error").lower().replace(" ", "_")
        return error_response(exc.code or 500, code, exc.description or exc.name)
