"""The --json shapes: what every listing prints with --json, chosen here rather than passed
through from the API, so a script that reads them keeps working when the API grows.
Keys may be added; none is renamed or removed. Times are UTC ISO 8601 with a Z; `url`s
are absolute.

    cpl note/show/week --json   an Entry; week: {"week", "letter": Entry, "entries": [EntrySummary]}
    cpl search --json           {"query", "results": [EntrySummary + "snippet", "score"],
                                 "has_more"}
    cpl experiments --json      {"experiments": [{"name", "title", "description",
                                 "params": {name: {"type", "default", "min", "max",
                                 "choices", "description"}}}]}
    cpl runs --json             {"runs": [RunSummary], "has_more"}
    cpl run / runs show --json  a Run (RunSummary + "result", "environment", "events",
                                 "waiting", "requires", "parent_id", "reruns"); with
                                 --watch, the Run as it ended
    cpl runs compare --json     {"runs": [RunSummary], "differing_params": {name: [values]},
                                 "results": {label: [values]}}
    cpl queue --json            {"queued": [{"key", "created_at", "server", "title", "tries",
                                 "last_error"}]}
    cpl drafts --json           {"drafts": [{"path", "entry_id", "base_revision", "saved_at"}]}
    cpl whoami --json           {"server", "server_source", "token_source", "login", "role",
                                 "via", "config_file", "state_dir", "queued"}

EntrySummary: id, kind, date, week, title, tags, status, revision, url, updated_at.
Entry: EntrySummary + body. RunSummary: id, experiment, status, reason, created_at,
started_at, finished_at, progress {step, total, ...latest values}, params, url.
"""

from __future__ import annotations

ENTRY_KEYS = ("id", "kind", "date", "week", "title", "tags", "status", "revision",
              "updated_at")
RUN_KEYS = ("id", "experiment", "status", "reason", "created_at", "started_at",
            "finished_at", "progress", "params")
RUN_DETAIL_KEYS = ("result", "environment", "events", "waiting", "requires", "parent_id",
                   "reruns", "since")


def entry_summary(entry: dict, server: str) -> dict:
    out = {k: entry.get(k) for k in ENTRY_KEYS}
    out["url"] = server + entry["url"] if entry.get("url") else None
    return out


def entry_full(entry: dict, server: str) -> dict:
    return {**entry_summary(entry, server), "body": entry.get("body", "")}


def search_hit(hit: dict, server: str, snippet_text: str) -> dict:
    return {**entry_summary(hit, server), "snippet": snippet_text, "score": hit.get("score")}


def run_summary(run: dict, server: str) -> dict:
    out = {k: run.get(k) for k in RUN_KEYS}
    out["url"] = server + run["url"] if run.get("url") else None
    return out


def run_full(run: dict, server: str) -> dict:
    return {**run_summary(run, server), **{k: run.get(k) for k in RUN_DETAIL_KEYS}}


def experiment(spec: dict) -> dict:
    return {"name": spec.get("name"), "title": spec.get("title"),
            "description": spec.get("description"),
            "params": {name: {k: p.get(k) for k in ("type", "default", "min", "max",
                                                     "choices", "description")}
                       for name, p in (spec.get("params") or {}).items()}}
