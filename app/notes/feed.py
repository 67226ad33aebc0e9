"""/feed.atom and /healthz: the two endpoints machines poll."""

from flask import Response, jsonify, request

from app import feed as atom
from app.db import get_session
from app.notes import bp


@bp.get("/feed.atom")
def feed():
    body = atom.build(get_session(), request.host_url)
    return Response(body, mimetype="application/atom+xml")


@bp.get("/healthz")
def healthz():
    return jsonify(status="ok")
