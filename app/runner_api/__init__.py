"""/api/v1/runner: the pull API of the runner agents (register, lease, heartbeat, …).

Runners authenticate with a bearer token of role `runner` (app/auth.py lets that role
call this blueprint and nothing else). Every call after the lease carries (run_id,
epoch); a stale epoch answers 409 and the agent kills its job.
"""

from flask import Blueprint

bp = Blueprint("runner", __name__, url_prefix="/api/v1/runner")

from app.runner_api import views  # noqa: E402,F401  (routes register on bp)
