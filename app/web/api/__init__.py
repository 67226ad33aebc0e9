"""The JSON API under /api/v1: everything the pages show and do, for the CLI and scripts.

    notebook.py      entries, revisions, letters, search, tags, the letter template
    idempotency.py   Idempotency-Key on POST /entries: a retry never makes a duplicate
    whoami.py        GET /me: who the server takes the caller for
    completion.py    what the editor offers after [[ and #
    journal.py       the experiment catalogue, runs, compare, schedules
    calculator.py    the what-if calculator (GET with query arguments, or POST)
    openapi/         the OpenAPI 3.1 document served at /api/v1/openapi.json

The runner agents' pull API is app/web/runner_api.py (a blueprint of its own, because a
runner token may call it and nothing else).
"""

from app.web.api import calculator, completion, journal, notebook, whoami  # noqa: F401
from app.web.api.blueprint import bp

__all__ = ["bp"]
