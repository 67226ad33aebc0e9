"""GET /api/v1/me: who the server takes the caller for, so a client (the terminal's
`cpl login`) can say "signed in as you@example.com (owner, via serve)" or what to do
instead. Who the caller is was decided before this view ran (app/web/auth)."""

from __future__ import annotations

from flask import g, jsonify

from app.web.api.blueprint import bp


@bp.get("/me")
def who_am_i():
    identity = g.identity
    return jsonify(login=identity.login, role=identity.role, via=identity.via,
                   name=identity.name, can_write=identity.can_write)
