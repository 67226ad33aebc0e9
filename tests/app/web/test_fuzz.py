"""Hostile-input sweep: every API operation in the OpenAPI document (schemathesis, valid and
invalid inputs) and every form and page (hypothesis), through the real app on a real
SQLite file. Whatever arrives, the answer is never a 5xx, and a refused request (4xx)
changes nothing: not a row, not a mirror file. The request count is printed at the end.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable

if TYPE_CHECKING:
    from schemathesis import GenerationMode

API_EXAMPLES = 12  # per operation and mode (valid, invalid); bounded: ~20 operations
FORM_EXAMPLES = 40  # per form (pages get a quarter of that)
COUNT = {"api": 0, "forms": 0}


@pytest.fixture(scope="module", autouse=True)
def report_request_count(request):
    yield
    total = COUNT["api"] + COUNT["forms"]
    line = (f"hostile-input sweep: {total} requests ({COUNT['api']} API via schemathesis, "
            f"{COUNT['forms']} forms and pages via hypothesis); no 5xx, no change on refusal")
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is not None and capture is not None:
        with capture.global_and_fixture_disabled():
            reporter.write_line("")
            reporter.write_line(line)


@pytest.fixture
def seeded(make_app, data_dir):
    """A notebook with something in it: entries (one with three revisions), a draft."""
    app = make_app()
    client = app.test_client()
    for i in range(3):
        client.post("/api/v1/entries", json={"title": f"Seed {i}", "body": f"[[Seed {i + 1}]]",
                                             "tags": ["seed"], "date": "2024-03-27"})
    for body in ("two", "three"):
        revision = client.get("/api/v1/entries/1").get_json()["revision"]
        client.put("/api/v1/entries/1", json={"body": body, "base_revision": revision})
    client.post("/api/v1/entries", json={"title": "Draft", "status": "draft"})
    return app


class Watch:
    """Did anything change since the last look? SQLite's data_version moves whenever another
    connection commits; the mirror and attachment folders are compared file by file. Cheap
    enough to take before and after every one of a thousand requests."""

    def __init__(self, data_dir: Path):
        self.data_dir = data_dir
        self.conn = sqlite3.connect(data_dir / "commonplace.db")

    def snapshot(self) -> tuple:
        version = self.conn.execute("PRAGMA data_version").fetchone()[0]
        files = tuple(sorted((str(p), p.stat().st_mtime_ns, p.stat().st_size)
                             for folder in ("notes", "attachments")
                             for p in (self.data_dir / folder).rglob("*") if p.is_file()))
        return version, files


def test_compare_with_a_huge_id_is_refused(seeded):
    r = with_peer_address(seeded).test_client().get(f"/api/v1/compare?ids={2**64},1")
    assert r.status_code == 422


def test_path_ids_beyond_sqlite_integers_are_404(seeded):
    client = seeded.test_client()
    for path in (f"/api/v1/entries/{2**63}", f"/entries/{2**64}/x", f"/entries/{10**30}/edit"):
        assert client.get(path).status_code == 404, path
    assert client.get(f"/api/v1/entries/{2**63 - 1}").status_code == 404  # in range: no row


# -- the API, from its OpenAPI document --------------------------------------------------


def with_peer_address(app):
    """schemathesis' WSGI transport sends no REMOTE_ADDR; every real server does (here:
    loopback, the dev-mode owner), so add it the way gunicorn would."""
    inner = app.wsgi_app

    def wsgi_app(environ, start_response):
        environ.setdefault("REMOTE_ADDR", "127.0.0.1")
        return inner(environ, start_response)

    app.wsgi_app = wsgi_app
    return app


def api_operations(app) -> list:
    # schemathesis is imported where it is used: every xdist worker imports every test
    # module to collect it.
    import schemathesis
    from schemathesis.config import SchemathesisConfig

    config = SchemathesisConfig.from_dict({"generation": {"database": "none"}})
    schema = schemathesis.openapi.from_wsgi("/api/v1/openapi.json", with_peer_address(app),
                                            config=config)
    return [result.ok() for result in schema.get_all_operations()]


def sweep_operation(operation, mode: GenerationMode, watch: Watch) -> None:
    @settings(max_examples=API_EXAMPLES, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(case=operation.as_strategy(generation_mode=mode))
    def call(case):
        before = watch.snapshot()
        response = case.call()
        COUNT["api"] += 1
        where = (case.method, case.formatted_path, mode.value)
        assert response.status_code < 500, (*where, response.text[:500])
        if response.status_code >= 400:
            assert watch.snapshot() == before, (*where, response.status_code)

    call()


def test_api_operations_never_fail_and_refusals_change_nothing(seeded, data_dir):
    """For each operation: valid inputs (positive) and schema-violating ones (negative)."""
    from schemathesis import GenerationMode

    watch = Watch(data_dir)
    operations = api_operations(seeded)
    assert len(operations) >= 15
    nothing_to_violate, failures = [], {}
    for operation in operations:
        for mode in GenerationMode:
            try:
                sweep_operation(operation, mode, watch)
            except Unsatisfiable:
                nothing_to_violate.append(operation.label)  # e.g. GET /api/v1/tags: no inputs
            except Exception as exc:  # noqa: BLE001 (collect every operation's finding)
                failures[(operation.label, mode.value)] = str(exc).splitlines()[0][:300]
    assert not failures, failures
    assert len(nothing_to_violate) < len(operations) // 2, nothing_to_violate


# -- every form and page -----------------------------------------------------------------

HOSTILE = [
    "", " ", "0", "-1", "1e309", "NaN", "null", "[]", "{}", "true", "2024-02-30", "2024-W54",
    "9999-12-31", "0000-01-01", "x" * 300, "\x00", "\ud7ff\ufffd", "<script>alert(1)</script>",
    "javascript:alert(1)", "' OR 1=1 --", '"; DROP TABLE entry; --', "../../etc/passwd",
    "%00", "${jndi:ldap://x}", "{{7*7}}", "\r\nSet-Cookie: x=1", "#tag " * 100,
    "[[" * 50, "```run\nid: 1\n```", "\u202e\u0000\u2028", "🙂" * 50,
]
values = st.one_of(st.sampled_from(HOSTILE), st.text(max_size=80),
                   st.integers(-2**63, 2**63).map(str),
                   st.sampled_from(["a" * 250_000, "y" * 1_100_000]))  # over the field limits
FIELDS = ["date", "title", "tags", "status", "body", "base_revision", "revision", "template",
          "q", "a", "b", "offset", "file", "token", "week"]
forms = st.dictionaries(st.sampled_from(FIELDS), values, max_size=8)
ids = st.one_of(st.sampled_from(["1", "2", "4", "999", "0"]), st.integers(-5, 10**12).map(str))


def _routes(app) -> list[tuple[str, str]]:
    """(method, rule) for every route with a form or a page: the API and static files are
    swept elsewhere."""
    found = []
    for rule in app.url_map.iter_rules():
        if rule.rule.startswith(("/api/", "/static/")) or rule.endpoint == "notes.healthz":
            continue
        for method in sorted(rule.methods - {"HEAD", "OPTIONS"}):
            found.append((method, rule.rule))
    return sorted(found)


def _fill(rule: str, draw_id, draw_text) -> str:
    def one(match):
        converter, name = match.group(1), match.group(2)
        if converter in ("int",) or name.endswith("_id") or name == "number":
            return draw_id()
        return draw_text()

    return re.sub(r"<(?:(\w+):)?(\w+)>", lambda m: one(m), rule)


def test_every_form_route_is_swept(seeded):
    routes = _routes(seeded)
    posts = [rule for method, rule in routes if method == "POST"]
    for expected in ("/entries/new", "/entries/<int:entry_id>/edit", "/preview",
                     "/settings/template", "/entries/<int:entry_id>/restore"):
        assert expected in posts
    assert len(routes) >= 20


def sweep_route(app, watch: Watch, method: str, rule: str, examples: int) -> None:
    # No cookie jar: the app sets no cookie, so none would be sent, and werkzeug's jar
    # rebuilds each request's whole URL twice to match cookies against it, a megabyte
    # query string and all.
    client = app.test_client(use_cookies=False)

    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(data=st.data())
    def call(data):
        path = _fill(rule, lambda: data.draw(ids), lambda: data.draw(segments))
        fields = data.draw(forms)
        before = watch.snapshot()
        if method == "GET":
            response = client.get(path, query_string=fields)
        else:
            response = client.open(path, method=method, data=fields)
        COUNT["forms"] += 1
        assert response.status_code < 500, (method, path, sorted(fields), response.text[:300])
        if response.status_code >= 400 or rule == "/preview":
            assert watch.snapshot() == before, (method, path, response.status_code)

    call()


segments = st.one_of(st.sampled_from(["2024-W13", "gpu", "seed", "x"]), st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="/?#"),
    min_size=1, max_size=30))


def test_every_form_and_page_survives_hostile_input(seeded, data_dir):
    watch = Watch(data_dir)
    failures = {}
    for method, rule in _routes(seeded):
        examples = FORM_EXAMPLES if method != "GET" else FORM_EXAMPLES // 4
        try:
            sweep_route(seeded, watch, method, rule, examples)
        except Exception as exc:  # noqa: BLE001 (collect every route's finding)
            failures[f"{method} {rule}"] = str(exc).splitlines()[0][:300]
    assert not failures, failures
