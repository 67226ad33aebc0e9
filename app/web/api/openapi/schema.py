"""The pieces every part of the OpenAPI document is built from: references, JSON
responses, query parameters, request bodies, the errors every operation may answer, and
the shared components (security schemes, error and entry schemas)."""

from __future__ import annotations


def ref(name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


def json_response(schema: dict, description: str = "OK") -> dict:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


ERRORS = {
    "400": json_response(ref("Error"), "Bad request"),
    "401": json_response(ref("Error"), "Bad or revoked token"),
    "403": json_response(ref("Error"), "Not allowed"),
    "404": json_response(ref("Error"), "Not found"),
    "422": json_response(ref("Error"), "Invalid field"),
}


def query(name: str, schema: dict, description: str = "") -> dict:
    return {"name": name, "in": "query", "required": False, "schema": schema,
            "description": description}


def body(schema: dict) -> dict:
    return {"required": True, "content": {"application/json": {"schema": schema}}}


COMPONENTS = {
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
        "Entry": {"allOf": [ref("EntrySummary"), {"type": "object", "properties": {
            "publish": {"type": "boolean"}, "body": {"type": "string"},
            "html": {"type": "string"}}}]},
        "Conflict": {"type": "object", "properties": {"error": {
            "type": "object", "properties": {
                "code": {"const": "conflict"}, "message": {"type": "string"},
                "current": {"type": "object", "description": "the entry as it is now"},
                "conflicts": {"type": "array", "description": "where both saves changed the "
                              "same lines (body) or the same field differently",
                              "items": {"type": "object", "properties": {
                                  "field": {"type": "string"}, "start": {"type": "integer"},
                                  "end": {"type": "integer"}, "base": {}, "theirs": {},
                                  "mine": {}}}},
                "offered": {"type": "object", "description": "a merge keeping both sides; "
                            "PUT it with base_revision = current.revision"}}}}},
    },
}
