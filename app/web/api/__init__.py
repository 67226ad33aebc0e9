"""The JSON API under /api/v1: everything the pages show and do, for the CLI and scripts.

    notebook_endpoints.py   entries, revisions, letters, search, tags, the letter template
    idempotency.py          Idempotency-Key on POST /entries: a retry never makes a duplicate
    whoami.py               GET /me: who the server takes the caller for
    completion.py           what the editor offers after [[ and #
    journal_endpoints.py    the experiment catalogue, runs, compare, schedules
    calculator_endpoint.py  the what-if calculator (GET with query arguments, or POST)
    openapi/                the OpenAPI 3.1 document served at /api/v1/openapi.json

The runner agents' pull API is app/web/runner_api.py (a blueprint of its own, because a
runner token may call it and nothing else).
"""

from app.web.api import (  # noqa: F401
    calculator_endpoint,
    completion,
    journal_endpoints,
    notebook_endpoints,
    whoami,
)
from app.web.api.blueprint import bp

__all__ = ["bp"]
