"""The OpenAPI 3.1 document for /api/v1, served at /api/v1/openapi.json.
It is written by hand beside the views and grows with them."""

from __future__ import annotations


def _ref(name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict, description: str = "OK") -> dict:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


ERRORS = {
    "400": _json(_ref("Error"), "Bad request"),
    "401": _json(_ref("Error"), "Bad or revoked token"),
    "403": _json(_ref("Error"), "Not allowed"),
    "404": _json(_ref("Error"), "Not found"),
    "422": _json(_ref("Error"), "Invalid field"),
}
ENTRY_ID = {"name": "entry_id", "in": "path", "required": True,
            "schema": {"type": "integer", "minimum": 1}}


def _query(name: str, schema: dict, description: str = "") -> dict:
    return {"name": name, "in": "query", "required": False, "schema": schema,
            "description": description}


def document() -> dict:
    from app.api.openapi_journal import paths as journal_paths  # it builds on the helpers here

    tags = {"type": "array", "items": {"type": "string", "pattern": "^#?[A-Za-z][A-Za-z0-9_/-]*$",
                                       "maxLength": 50}, "maxItems": 30}
    entry_fields = {
        "date": {"type": "string", "format": "date"},
        "title": {"type": "string", "minLength": 1, "maxLength": 200},
        "body": {"type": "string", "maxLength": 1000000},
        "tags": tags,
        "status": {"type": "string", "enum": ["draft", "published"]},
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": "Commonplace API", "version": "1",
                 "description": "Entries, weekly letters, revisions and search of a "
                                "Commonplace notebook. Errors are "
                                "{\"error\": {\"code\", \"message\"}} with a 4xx status."},
        "servers": [{"url": "/"}],
        "security": [{"bearer": []}, {"tailnet": []}],
        "paths": {
            "/healthz": {"get": {"summary": "Liveness", "security": [],
                                 "responses": {"200": _json({"type": "object"})}}},
            "/api/v1/entries": {
                "get": {
                    "summary": "List entries, newest first, with optional filters",
                    "parameters": [
                        _query("q", {"type": "string", "maxLength": 500}, "search text"),
                        _query("tag", {"type": "string"}), _query("from", {"type": "string",
                                                                          "format": "date"}),
                        _query("to", {"type": "string", "format": "date"}),
                        _query("kind", {"type": "string", "enum": ["entry", "week"]}),
                        _query("week", {"type": "string", "pattern": r"^\d{4}-W\d{2}$"}),
                        _query("limit", {"type": "integer", "minimum": 1, "maximum": 500}),
                        _query("offset", {"type": "integer", "minimum": 0}),
                    ],
                    "responses": {"200": _json({"type": "object", "properties": {
                        "entries": {"type": "array", "items": _ref("EntrySummary")},
                        "has_more": {"type": "boolean"}}}), **ERRORS},
                },
                "post": {
                    "summary": "Create an entry",
                    "requestBody": {"required": True, "content": {"application/json": {
                        "schema": {"type": "object", "required": ["title"],
                                   "additionalProperties": False, "properties": entry_fields}}}},
                    "responses": {"201": _json(_ref("Entry"), "Created"), **ERRORS},
                },
            },
            "/api/v1/entries/{entry_id}": {
                "parameters": [ENTRY_ID],
                "get": {"summary": "One entry", "responses": {"200": _json(_ref("Entry")),
                                                             **ERRORS}},
                "put": {
                    "summary": "Change an entry; base_revision must be its current revision",
                    "requestBody": {"required": True, "content": {"application/json": {
                        "schema": {"type": "object", "required": ["base_revision"],
                                   "additionalProperties": False, "properties": {
                                       **entry_fields,
                                       "base_revision": {"type": "integer", "minimum": 0}}}}}},
                    "responses": {"200": _json(_ref("Entry")),
                                  "409": _json(_ref("Conflict"), "Stale base revision"),
                                  **ERRORS},
                },
                "delete": {
                    "summary": "Delete an entry and its history",
                    "parameters": [_query("base_revision", {"type": "integer", "minimum": 0})],
                    "responses": {"204": {"description": "Deleted"},
                                  "409": _json(_ref("Conflict"), "Stale base revision"),
                                  **ERRORS},
                },
            },
            "/api/v1/entries/{entry_id}/revisions": {
                "parameters": [ENTRY_ID],
                "get": {"summary": "Every saved revision, newest first",
                        "responses": {"200": _json({"type": "object"}), **ERRORS}},
            },
            "/api/v1/entries/{entry_id}/revisions/{number}": {
                "parameters": [ENTRY_ID, {"name": "number", "in": "path", "required": True,
                                          "schema": {"type": "integer", "minimum": 1}}],
                "get": {"summary": "One revision with its full text",
                        "responses": {"200": _json({"type": "object"}), **ERRORS}},
            },
            "/api/v1/entries/{entry_id}/restore": {
                "parameters": [ENTRY_ID],
                "post": {
                    "summary": "Restore an old revision's text as a new revision",
                    "requestBody": {"required": True, "content": {"application/json": {
                        "schema": {"type": "object", "required": ["revision", "base_revision"],
                                   "properties": {"revision": {"type": "integer", "minimum": 1},
                                                  "base_revision": {"type": "integer"}}}}}},
                    "responses": {"200": _json(_ref("Entry")),
                                  "409": _json(_ref("Conflict"), "Stale base revision"),
                                  **ERRORS},
                },
            },
            "/api/v1/entries/{entry_id}/backlinks": {
                "parameters": [ENTRY_ID],
                "get": {"summary": "Entries that [[link]] here, with context",
                        "responses": {"200": _json({"type": "object"}), **ERRORS}},
            },
            "/api/v1/entries/{entry_id}/attachments": {
                "parameters": [ENTRY_ID],
                "post": {
                    "summary": "Upload an image, PDF or text file (at most 10 MB)",
                    "requestBody": {"required": True, "content": {"multipart/form-data": {
                        "schema": {"type": "object", "required": ["file"], "properties": {
                            "file": {"type": "string", "format": "binary"}}}}}},
                    "responses": {"201": _json({"type": "object", "properties": {
                        "url": {"type": "string"}, "markdown": {"type": "string"}}}),
                        "413": _json(_ref("Error"), "Too large"),
                        "415": _json(_ref("Error"), "Type not accepted"), **ERRORS},
                },
            },
            "/api/v1/weeks/{week}": {
                "parameters": [{"name": "week", "in": "path", "required": True,
                                "schema": {"type": "string", "pattern": r"^\d{4}-W\d{2}$"}}],
                "get": {"summary": "A week's letter and entries (this week's is created "
                                   "on demand)",
                        "responses": {"200": _json({"type": "object", "properties": {
                            "letter": _ref("Entry"),
                            "entries": {"type": "array", "items": _ref("EntrySummary")}}}),
                            **ERRORS}},
            },
            "/api/v1/search": {
                "get": {
                    "summary": "Ranked full-text search",
                    "description": "Words (all required), \"phrases\", prefix*, OR, -exclude, "
                                   "and filters tag:, from:, to:, week:, kind:.",
                    "parameters": [
                        {"name": "q", "in": "query", "required": True,
                         "schema": {"type": "string", "maxLength": 500}},
                        _query("limit", {"type": "integer", "minimum": 1, "maximum": 100}),
                        _query("offset", {"type": "integer", "minimum": 0}),
                    ],
                    "responses": {"200": _json({"type": "object"}), **ERRORS},
                },
            },
            "/api/v1/tags": {"get": {"summary": "Tags with counts",
                                     "responses": {"200": _json({"type": "object"})}}},
            "/api/v1/letter-template": {
                "get": {"summary": "The weekly letter template",
                        "responses": {"200": _json({"type": "object"})}},
                "put": {
                    "summary": "Change the template new letters start from",
                    "requestBody": {"required": True, "content": {"application/json": {
                        "schema": {"type": "object", "required": ["template"], "properties": {
                            "template": {"type": "string", "maxLength": 20000}}}}}},
                    "responses": {"200": _json({"type": "object"}), **ERRORS},
                },
            },
            "/feed.atom": {"get": {
                "summary": "Atom feed of published entries and letters",
                "security": [{"feedToken": []}, {"bearer": []}, {"tailnet": []}],
                "parameters": [_query("token", {"type": "string"}, "feed token")],
                "responses": {"200": {"description": "Atom 1.0",
                                      "content": {"application/atom+xml": {}}}}}},
            **journal_paths(),
        },
        "components": {
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer",
                           "description": "A token from `commonplace token create NAME "
                                          "--role owner|viewer|runner|feed`; runner tokens "
                                          "call only /api/v1/runner/..."},
                "tailnet": {"type": "apiKey", "in": "header", "name": "Tailscale-User-Login",
                            "description": "Set by `tailscale serve` and believed only from "
                                           "it (a loopback peer, not Funnel); an owner or "
                                           "viewer login from COMMONPLACE_OWNERS/VIEWERS. "
                                           "Cross-site writes are refused."},
                "feedToken": {"type": "apiKey", "in": "query", "name": "token",
                              "description": "A feed token, for /feed.atom only"},
            },
            "schemas": {
                "Error": {"type": "object", "required": ["error"], "properties": {
                    "error": {"type": "object", "required": ["code", "message"], "properties": {
                        "code": {"type": "string"}, "message": {"type": "string"},
                        "field": {"type": "string"}}}}},
                "EntrySummary": {"type": "object", "properties": {
                    "id": {"type": "integer"}, "kind": {"type": "string"},
                    "date": {"type": "string"}, "week": {"type": "string"},
                    "title": {"type": "string"}, "slug": {"type": "string"},
                    "tags": {"type": "array", "items": {"type": "string"}},
                    "status": {"type": "string"}, "revision": {"type": "integer"},
                    "url": {"type": "string"}}},
                "Entry": {"allOf": [_ref("EntrySummary"), {"type": "object", "properties": {
                    "body": {"type": "string"}, "html": {"type": "string"}}}]},
                "Conflict": {"type": "object", "properties": {"error": {
                    "type": "object", "properties": {
                        "code": {"const": "conflict"}, "message": {"type": "string"},
                        "current": {"type": "object"}}}}},
            },
        },
    }
