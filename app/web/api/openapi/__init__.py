"""The OpenAPI 3.1 document for /api/v1, served at /api/v1/openapi.json. Written by hand
beside the views, one part per half of the app; a test checks that it is valid and that
it names every /api/v1 route."""

from __future__ import annotations

from app.web.api.openapi import calculator, journal, notebook
from app.web.api.openapi.schema import COMPONENTS


def document() -> dict:
    return {
        "openapi": "3.1.0",
        "info": {"title": "Commonplace API", "version": "1",
                 "description": "Entries, weekly letters, revisions and search of a "
                                "Commonplace notebook, and its experiment journal. Errors "
                                "are {\"error\": {\"code\", \"message\"}} with a 4xx "
                                "status."},
        "servers": [{"url": "/"}],
        "security": [{"bearer": []}, {"tailnet": []}],
        "paths": {**notebook.paths(), **journal.paths(), **calculator.paths()},
        "components": COMPONENTS,
    }
