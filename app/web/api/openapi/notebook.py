"""OpenAPI paths of the notebook: entries, revisions, letters, search, tags, the letter
template, the feed and the health check. Limits come from the modules that enforce them."""

from __future__ import annotations

from app.notebook import entries, letters, search, suggest
from app.web.api import idempotency
from app.web.api.openapi.schema import ERRORS, json_response, query, ref

ENTRY_ID = {"name": "entry_id", "in": "path", "required": True,
            "schema": {"type": "integer", "minimum": 1}}

# What a tag may be as sent: '#' and capitals are dropped before entries.TAG_RE applies.
TAGS = {"type": "array", "items": {"type": "string", "pattern": "^#?[A-Za-z][A-Za-z0-9_/-]*$",
                                   "maxLength": 50}, "maxItems": entries.MAX_TAGS}
ENTRY_FIELDS = {
    "date": {"type": "string", "format": "date"},
    "title": {"type": "string", "minLength": 1, "maxLength": entries.MAX_TITLE},
    "body": {"type": "string", "maxLength": entries.MAX_BODY},
    "tags": TAGS,
    "status": {"type": "string", "enum": list(entries.STATUSES)},
    "publish": {"type": "boolean", "description": "true: on the public site that "
                "`commonplace publish` writes (docs/PUBLISHING.md)"},
}


def paths() -> dict:
    return {
        "/healthz": {"get": {"summary": "Liveness", "security": [],
                             "responses": {"200": json_response({"type": "object"})}}},
        "/api/v1/entries": {
            "get": {
                "summary": "List entries, newest first, with optional filters",
                "parameters": [
                    query("q", {"type": "string", "maxLength": search.MAX_QUERY}, "search text"),
                    query("tag", {"type": "string"}), query("from", {"type": "string",
                                                                      "format": "date"}),
                    query("to", {"type": "string", "format": "date"}),
                    query("kind", {"type": "string", "enum": ["entry", "week"]}),
                    query("week", {"type": "string", "pattern": r"^\d{4}-W\d{2}$"}),
                    query("limit", {"type": "integer", "minimum": 1, "maximum": 500}),
                    query("offset", {"type": "integer", "minimum": 0}),
                ],
                "responses": {"200": json_response({"type": "object", "properties": {
                    "entries": {"type": "array", "items": ref("EntrySummary")},
                    "has_more": {"type": "boolean"}}}), **ERRORS},
            },
            "post": {
                "summary": "Create an entry",
                "description": "With an Idempotency-Key, repeating the same request (an "
                               "answer lost on the way, an offline queue sending again) "
                               "answers 200 with the entry the first one made and the "
                               "header Idempotent-Replayed: true; the same key with a "
                               "different body is refused (422).",
                "parameters": [{
                    "name": idempotency.HEADER, "in": "header", "required": False,
                    "schema": {"type": "string", "pattern": idempotency.KEY_RE.pattern},
                    "description": "a key the client makes per capture, e.g. a UUID"}],
                "requestBody": {"required": True, "content": {"application/json": {
                    "schema": {"type": "object", "required": ["title"],
                               "additionalProperties": False, "properties": ENTRY_FIELDS}}}},
                "responses": {"201": json_response(ref("Entry"), "Created"),
                              "200": json_response(ref("Entry"), "A replay: the entry this "
                                                   "Idempotency-Key made"),
                              "410": json_response(ref("Error"), "The entry this "
                                                   "Idempotency-Key made was deleted"),
                              **ERRORS},
            },
        },
        "/api/v1/entries/{entry_id}": {
            "parameters": [ENTRY_ID],
            "get": {"summary": "One entry", "responses": {"200": json_response(ref("Entry")),
                                                         **ERRORS}},
            "put": {
                "summary": "Change an entry made from base_revision",
                "description": "If the entry was saved since base_revision, the change is "
                               "merged with that save line by line (the answer then has "
                               "merged_with: the revision merged with); only changes to the "
                               "same lines (or the same field) answer 409 with the "
                               "conflicting hunks and a merge that keeps both sides. A "
                               "base_revision ahead of the entry's is a bad input (422).",
                "requestBody": {"required": True, "content": {"application/json": {
                    "schema": {"type": "object", "required": ["base_revision"],
                               "additionalProperties": False, "properties": {
                                   **ENTRY_FIELDS,
                                   "base_revision": {"type": "integer", "minimum": 0}}}}}},
                "responses": {"200": json_response(ref("Entry")),
                              "409": json_response(ref("Conflict"), "Overlapping changes"),
                              **ERRORS},
            },
            "delete": {
                "summary": "Delete an entry and its history",
                "parameters": [query("base_revision", {"type": "integer", "minimum": 0})],
                "responses": {"204": {"description": "Deleted"},
                              "409": json_response(ref("Conflict"), "Stale base revision"),
                              **ERRORS},
            },
        },
        "/api/v1/entries/{entry_id}/revisions": {
            "parameters": [ENTRY_ID],
            "get": {"summary": "Every saved revision, newest first",
                    "responses": {"200": json_response({"type": "object"}), **ERRORS}},
        },
        "/api/v1/entries/{entry_id}/revisions/{number}": {
            "parameters": [ENTRY_ID, {"name": "number", "in": "path", "required": True,
                                      "schema": {"type": "integer", "minimum": 1}}],
            "get": {"summary": "One revision with its full text",
                    "responses": {"200": json_response({"type": "object"}), **ERRORS}},
        },
        "/api/v1/entries/{entry_id}/restore": {
            "parameters": [ENTRY_ID],
            "post": {
                "summary": "Restore an old revision's text as a new revision",
                "requestBody": {"required": True, "content": {"application/json": {
                    "schema": {"type": "object", "required": ["revision", "base_revision"],
                               "properties": {"revision": {"type": "integer", "minimum": 1},
                                              "base_revision": {"type": "integer"}}}}}},
                "responses": {"200": json_response(ref("Entry")),
                              "409": json_response(ref("Conflict"), "Stale base revision"),
                              **ERRORS},
            },
        },
        "/api/v1/entries/{entry_id}/backlinks": {
            "parameters": [ENTRY_ID],
            "get": {"summary": "Entries with a [[link]] that opens this one, newest first, "
                               "each once with its first link's context; a page at a "
                               "time (100 unless limit says), with the total",
                    "parameters": [
                        query("limit", {"type": "integer", "minimum": 1, "maximum": 500}),
                        query("offset", {"type": "integer", "minimum": 0})],
                    "responses": {"200": json_response({"type": "object", "properties": {
                        "backlinks": {"type": "array", "items": {"allOf": [
                            ref("EntrySummary"), {"type": "object", "properties": {
                                "context": {"type": "string"}}}]}},
                        "total": {"type": "integer"}, "has_more": {"type": "boolean"},
                        "limit": {"type": "integer"}, "offset": {"type": "integer"}}}),
                        **ERRORS}},
        },
        "/api/v1/entries/{entry_id}/attachments": {
            "parameters": [ENTRY_ID],
            "post": {
                "summary": "Upload an image, PDF or text file (at most 10 MB)",
                "requestBody": {"required": True, "content": {"multipart/form-data": {
                    "schema": {"type": "object", "required": ["file"], "properties": {
                        "file": {"type": "string", "format": "binary"}}}}}},
                "responses": {"201": json_response({"type": "object", "properties": {
                    "url": {"type": "string"}, "markdown": {"type": "string"}}}),
                    "413": json_response(ref("Error"), "Too large"),
                    "415": json_response(ref("Error"), "Type not accepted"), **ERRORS},
            },
        },
        "/api/v1/weeks/{week}": {
            "parameters": [{"name": "week", "in": "path", "required": True,
                            "schema": {"type": "string", "pattern": r"^\d{4}-W\d{2}$"}}],
            "get": {"summary": "A week's letter and entries (this week's is created "
                               "on demand)",
                    "responses": {"200": json_response({"type": "object", "properties": {
                        "letter": ref("Entry"),
                        "entries": {"type": "array", "items": ref("EntrySummary")}}}),
                        **ERRORS}},
        },
        "/api/v1/search": {
            "get": {
                "summary": "Ranked full-text search",
                "description": "Words (all required), \"phrases\", prefix*, OR, -exclude, "
                               "and filters tag:, from:, to:, week:, kind:.",
                "parameters": [
                    {"name": "q", "in": "query", "required": True,
                     "schema": {"type": "string", "maxLength": search.MAX_QUERY}},
                    query("limit", {"type": "integer", "minimum": 1, "maximum": 100}),
                    query("offset", {"type": "integer", "minimum": 0}),
                ],
                "responses": {"200": json_response({"type": "object"}), **ERRORS},
            },
        },
        "/api/v1/me": {"get": {
            "summary": "Who the server takes the caller for",
            "responses": {"200": json_response({"type": "object", "properties": {
                "login": {"type": "string"}, "name": {"type": "string"},
                "role": {"type": "string", "description": "owner or viewer"},
                "via": {"type": "string", "description": "how the server knows: serve "
                        "(tailscale serve's headers), whois, dev (loopback) or token"},
                "can_write": {"type": "boolean"}}}), **ERRORS}}},
        "/api/v1/tags": {"get": {"summary": "Tags with counts",
                                 "responses": {"200": json_response({"type": "object"})}}},
        "/api/v1/complete": {"get": {
            "summary": "What the editor offers after [[ (link), ![[ (embed) or # (tag)",
            "description": "link: this week and today, letters and dates (text that "
                           "starts with a digit), then titles, best match first; after "
                           "'Title#', that note's headings; embed: attachments by file "
                           "name, then what link offers; tag: tags that start with the "
                           "prefix, most used first. Drafts only for owners.",
            "parameters": [
                {"name": "kind", "in": "query", "required": True,
                 "schema": {"type": "string", "enum": ["link", "embed", "tag"]}},
                query("prefix", {"type": "string", "maxLength": suggest.MAX_PREFIX},
                      "what was typed after [[ or #"),
                query("limit", {"type": "integer", "minimum": 1,
                                "maximum": suggest.MAX_LIMIT}),
            ],
            "responses": {"200": json_response({"type": "object", "properties": {
                "kind": {"type": "string"}, "prefix": {"type": "string"},
                "items": {"type": "array", "items": {"type": "object", "properties": {
                    "insert": {"type": "string"}, "label": {"type": "string"},
                    "detail": {"type": "string"},
                    "kind": {"enum": ["entry", "week", "date", "tag", "heading",
                                      "file"]}}}}}}),
                **ERRORS},
        }},
        "/api/v1/letter-template": {
            "get": {"summary": "The weekly letter template",
                    "responses": {"200": json_response({"type": "object"})}},
            "put": {
                "summary": "Change the template new letters start from",
                "requestBody": {"required": True, "content": {"application/json": {
                    "schema": {"type": "object", "required": ["template"], "properties": {
                        "template": {"type": "string", "maxLength": letters.MAX_TEMPLATE}}}}}},
                "responses": {"200": json_response({"type": "object"}), **ERRORS},
            },
        },
        "/feed.atom": {"get": {
            "summary": "Atom feed of published entries and letters",
            "security": [{"feedToken": []}, {"bearer": []}, {"tailnet": []}],
            "parameters": [query("token", {"type": "string"}, "feed token")],
            "responses": {"200": {"description": "Atom 1.0",
                                  "content": {"application/atom+xml": {}}}}}},
    }
