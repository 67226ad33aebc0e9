"""OpenAPI paths of the experiment journal: experiments, runs, schedules, and the runner
protocol (docs/RUNNER.md). Limits come from the modules that enforce them."""

from __future__ import annotations

from app.journal import gangs, run_files, run_metrics, run_query, runs, schedules
from app.web.api.openapi.schema import ERRORS as COMMON_ERRORS
from app.web.api.openapi.schema import body, json_response, query, ref
from base import statuses

ERRORS = {**COMMON_ERRORS,
          "409": json_response(ref("Error"), "Not possible in the run's state, or a stale lease")}
OBJ = {"type": "object"}
RUN_ID = {"name": "run_id", "in": "path", "required": True,
          "schema": {"type": "integer", "minimum": 1}}
SCHEDULE_ID = {"name": "schedule_id", "in": "path", "required": True,
               "schema": {"type": "integer", "minimum": 1}}
NAME = {"name": "name", "in": "path", "required": True,
        "schema": {"type": "string", "pattern": run_files.ARTIFACT_NAME_RE.pattern}}


RUN_LIST = ("Filters are AND-ed. A sorted list holds only the runs that have that result, "
            "ties broken by run id. Page with cursor=next_cursor (keyset) or offset. "
            "A bad argument is a 422 naming it; an unknown parameter name matches nothing.")


EPOCH = {"epoch": {"type": "integer", "minimum": 0}}
SCHEDULE_FIELDS = {
    "name": {"type": "string", "maxLength": 100},
    "experiment": {"type": "string"},
    "params": OBJ,
    "cron": {"type": "string", "description": "five crontab fields, e.g. '0 2 * * sun', or "
                                              "a phrase: 'every Sunday 02:00', 'weekdays "
                                              "at 9', 'every 6 hours'"},
    "timezone": {"type": "string", "description": "an IANA zone, e.g. Europe/London"},
    "enabled": {"type": "boolean"},
    "misfire_grace_s": {"type": "integer", "minimum": 0, "maximum": schedules.MAX_GRACE_S},
}


def paths() -> dict:
    runner = {
        "/api/v1/runner/register": (
            "Register this runner (its token names it) with labels, and the owner's own "
            "experiments it has installed (declarations, or files found broken and why)",
            {"labels": OBJ, "version": {"type": "string"},
             "experiments": {"type": "array", "maxItems": 50, "items": OBJ}}),
        "/api/v1/runner/lease": (
            "Long-poll for a run (204 when none). A runner that offers a node may join a "
            "run that spans hosts; its run then carries gang: {nodes, node_rank, endpoint, "
            "rdzv_id}",
            {"wait": {"type": "number", "minimum": 0, "maximum": 30},
             "node": {"type": "object", "additionalProperties": False,
                      "required": ["address", "port"], "properties": {
                          "address": {"type": "string", "maxLength": 100},
                          "port": {"type": "integer", "minimum": 1, "maximum": 65535}}}}),
        "/api/v1/runner/runs/{run_id}/heartbeat": (
            "Renew the lease, report progress; the answer may ask to cancel",
            {**EPOCH, "step": {"type": "integer"}, "total": {"type": "integer"},
             "progress": OBJ}),
        "/api/v1/runner/runs/{run_id}/transition": (
            "Report RUNNING / SUCCEEDED / FAILED / CANCELLED",
            {**EPOCH, "to": {"type": "string",
                             "enum": list(runs.RUNNER_REPORTS)},
             "reason": {"type": "string"}, "reason_code": {"type": "string"},
             "exit_code": {"type": ["integer", "null"]}, "environment": OBJ}),
        "/api/v1/runner/runs/{run_id}/logs": (
            "Append a log chunk at a byte offset (idempotent)",
            {**EPOCH, "offset": {"type": "integer", "minimum": 0},
             "data": {"type": "string", "maxLength": run_files.MAX_LOG_CHUNK}}),
        "/api/v1/runner/runs/{run_id}/metrics": (
            f"Append metric points (at most {runs.MAX_METRIC_POINTS})",
            {**EPOCH, "points": {"type": "array", "maxItems": runs.MAX_METRIC_POINTS, "items": {
                "type": "object", "required": ["key", "step", "value"],
                "properties": {"key": {"type": "string"}, "step": {"type": "integer"},
                               "value": {"type": "number"}}}}}),
        "/api/v1/runner/runs/{run_id}/result": ("Store the run's result.json",
                                                {**EPOCH, "result": OBJ}),
    }
    out: dict = {
        "/api/v1/experiments": {"get": {
            "summary": "The experiment catalogue with parameter schemas: the lab's, then "
                       "the owner's own that runners reported (own: true); broken lists "
                       "the experiment files a runner could not use, and why",
            "responses": {"200": json_response(OBJ)}}},
        "/api/v1/experiments/{name}": {"get": {
            "summary": "One experiment's description and parameter schema",
            "parameters": [{"name": "name", "in": "path", "required": True,
                            "schema": {"type": "string"}}],
            "responses": {"200": json_response(OBJ), **ERRORS}}},
        "/api/v1/runs": {
            "get": {"summary": "Runs, newest first or sorted by a result, filtered by any "
                               "parameter",
                    "description": RUN_LIST,
                    "parameters": [
                        query("status", {"type": "string",
                                          "description": "comma-separated: " +
                                          ", ".join(statuses.STATUSES)}),
                        query("experiment", {"type": "string", "description": "an "
                                             "experiment's name; one that no experiment "
                                             "has is a 422 offering the closest"}),
                        query("week", {"type": "string", "pattern": r"^\d{4}-W\d{2}$"}),
                        query("schedule", {"type": "integer", "minimum": 1}),
                        {"name": "param.{name}", "in": "query", "style": "form",
                         "schema": {"type": "string"},
                         "description": "param.<name>=<value>, repeatable, AND-ed: runs "
                                        "whose parameter has this value (a list parameter: "
                                        "holds it), e.g. param.strategies=1f1b; at most "
                                        f"{run_query.MAX_PARAM_FILTERS}"},
                        query("params", {"type": "string", "description": "the same as "
                                         "space-separated name=value pairs"}),
                        query("sort", {"type": "string",
                                       "pattern": run_metrics.SORT_KEY_PATTERN,
                                       "description": "a scalar result: " +
                                       ", ".join(run_metrics.METRICS) + "; alone (the "
                                       "run's best correct strategy) or after a strategy "
                                       "or collective that an experiment offers or a run "
                                       "reported: 1f1b.step_time_s"}),
                        query("order", {"type": "string", "enum": ["asc", "desc"],
                                        "description": "default: best first"}),
                        query("cursor", {"type": "string", "description": "next_cursor of "
                                         "the previous page"}),
                        query("before", {"type": "integer", "minimum": 1,
                                         "description": "newest first: runs older than "
                                                        "this id"}),
                        query("limit", {"type": "integer", "minimum": 1, "maximum": 500}),
                        query("offset", {"type": "integer", "minimum": 0})],
                    "responses": {"200": json_response(OBJ, "{runs, has_more, next_cursor, "
                                                            "sort, order}; with sort each "
                                                            "run has sort_value"),
                                  **ERRORS}},
            "post": {"summary": "Queue a run; omitted params take their defaults",
                     "requestBody": body({"type": "object", "required": ["experiment"],
                                           "additionalProperties": False, "properties": {
                                               "experiment": {"type": "string"},
                                               "params": OBJ,
                                               "requires": {"type": "object", "properties": {
                                                   "gpu_model": {"type": "string"},
                                                   "gpu_count": {"type": "integer"}}},
                                               "nodes": {
                                                   "type": "integer", "minimum": 1,
                                                   "maximum": gangs.MAX_NODES,
                                                   "description": "hosts that run it "
                                                   "together, world_size / nodes ranks "
                                                   "each (default 1)"},
                                               "queue_anyway": {
                                                   "type": "boolean", "description":
                                                   "queue it even if no registered runner "
                                                   "can take it (else 422)"}}}),
                     "responses": {"201": json_response(OBJ, "Queued; `waiting` says what "
                                                        "may keep it waiting"), **ERRORS}}},
        "/api/v1/runs/{run_id}": {"parameters": [RUN_ID], "get": {
            "summary": "Status, reason, progress, result, events, environment",
            "description": "A successful run with numbers has `since`, what its card says "
                           "of the runs before it: {previous (the previous comparable "
                           "run's id, null for the first of its parameters), trend_url, "
                           "edited_from, edited (a schedule's earlier run on other "
                           "parameters, and which), lines: [{text, regression}]}",
            "responses": {"200": json_response(OBJ), **ERRORS}}},
        "/api/v1/runs/{run_id}/cancel": {"parameters": [RUN_ID], "post": {
            "summary": "Cancel (at once if queued; via the runner's heartbeat if running)",
            "responses": {"200": json_response(OBJ), **ERRORS}}},
        "/api/v1/runs/{run_id}/rerun": {"parameters": [RUN_ID], "post": {
            "summary": "A new run with the same parameters, linked to this one",
            "responses": {"201": json_response(OBJ, "Queued"), **ERRORS}}},
        "/api/v1/runs/{run_id}/logs": {"parameters": [RUN_ID], "get": {
            "summary": "The log from a byte offset",
            "parameters": [query("offset", {"type": "integer", "minimum": 0})],
            "responses": {"200": json_response(OBJ), **ERRORS}}},
        "/api/v1/runs/{run_id}/metrics": {"parameters": [RUN_ID], "get": {
            "summary": "Metric series by key",
            "parameters": [query("key", {"type": "string"})],
            "responses": {"200": json_response(OBJ), **ERRORS}}},
        "/api/v1/runs/{run_id}/artifacts/{name}": {
            "parameters": [RUN_ID, NAME],
            "get": {"summary": "A file the run produced (events.jsonl, charts)",
                    "responses": {"200": {"description": "The file"}, **ERRORS}}},
        "/api/v1/runner/runs/{run_id}/artifacts/{name}": {
            "parameters": [RUN_ID, NAME],
            "put": {"summary": "Upload a file the run produced (≤ 8 MB)", "tags": ["runner"],
                    "parameters": [{"name": "epoch", "in": "query", "required": True,
                                    "schema": {"type": "integer", "minimum": 0}}],
                    "requestBody": {"required": True, "content": {
                        "application/octet-stream": {"schema": {"type": "string",
                                                                "format": "binary"}}}},
                    "responses": {"200": json_response(OBJ), **ERRORS}}},
        "/api/v1/runs/{run_id}/trace.json": {"parameters": [RUN_ID], "get": {
            "summary": "The run's per-rank events as a Chrome Trace Event file (Perfetto, "
                       "chrome://tracing)",
            "description": "traceEvents: pid = rank; tid = the rank's steps, compute and "
                           "communication tracks; X events with ts/dur in µs from the "
                           "run's first event; s/f flows from each send to its receive; "
                           "M names. otherData: run id, experiment, params. 404 when the "
                           "run logged no events.",
            "responses": {"200": json_response(OBJ, "A Chrome Trace Event JSON object"),
                          **ERRORS}}},
        "/api/v1/compare": {"get": {
            "summary": f"Two to {run_query.MAX_COMPARE} runs side by side, with the "
                       "parameters that differ",
            "parameters": [{"name": "ids", "in": "query", "required": True,
                            "schema": {"type": "string", "pattern": r"^\d+(,\d+)+$"}}],
            "responses": {"200": json_response(OBJ), **ERRORS}}},
        "/api/v1/schedules/preview": {"get": {
            "summary": "The crontab line and next fires of a schedule's 'when', unsaved",
            "description": "cron: a crontab line or a phrase such as 'every Sunday 02:00', "
                           "'weekdays at 9', 'every 6 hours'.",
            "parameters": [{"name": "cron", "in": "query", "required": True,
                            "schema": {"type": "string", "maxLength": 200}},
                           query("timezone", {"type": "string", "maxLength": 64})],
            "responses": {"200": json_response(OBJ), **ERRORS}}},
        "/api/v1/schedules": {
            "get": {"summary": "Schedules with their next fire times",
                    "responses": {"200": json_response(OBJ)}},
            "post": {"summary": "Create a schedule (cron validated)",
                     "requestBody": body({"type": "object", "required": ["experiment", "cron"],
                                           "additionalProperties": False,
                                           "properties": SCHEDULE_FIELDS}),
                     "responses": {"201": json_response(OBJ, "Created"), **ERRORS}}},
        "/api/v1/schedules/{schedule_id}": {
            "parameters": [SCHEDULE_ID],
            "get": {"summary": "One schedule", "responses": {"200": json_response(OBJ), **ERRORS}},
            "put": {"summary": "Change a schedule",
                    "requestBody": body({"type": "object", "additionalProperties": False,
                                          "properties": SCHEDULE_FIELDS}),
                    "responses": {"200": json_response(OBJ), **ERRORS}},
            "delete": {"summary": "Delete a schedule (its runs stay)",
                       "responses": {"204": {"description": "Deleted"}, **ERRORS}}},
    }
    for path, (summary, properties) in runner.items():
        item = {"post": {"summary": summary, "tags": ["runner"],
                         "requestBody": body({"type": "object", "properties": properties}),
                         "responses": {"200": json_response(OBJ), **ERRORS}}}
        if "{run_id}" in path:
            item["parameters"] = [RUN_ID]
        if path.endswith("/lease"):
            item["post"]["responses"]["204"] = {"description": "No work"}
        out[path] = item
    return out
