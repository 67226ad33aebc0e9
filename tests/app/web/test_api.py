"""The JSON API through the real app: contract, conflicts, and bad input that changes nothing."""

import io
import json

import pytest

from app.models import Attachment, Entry, Revision
from app.notebook import isoweeks
from tests.helpers import count

JSON = "application/json"
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64


def post(client, body, **kw):
    return client.post("/api/v1/entries", json=body, **kw)


def test_healthz(client):
    health = client.get("/healthz").get_json()
    assert health["status"] == "ok"
    assert health["backup"]["at"] is None and "no backup yet" in health["backup"]["warning"]


def test_create_get_update_delete(client):
    r = post(client, {"date": "2024-03-31", "title": "Working notes", "body": "# Hi\n\ntext",
                      "tags": ["ml", "gpu"], "status": "published"})
    assert r.status_code == 201
    created = r.get_json()
    assert {"id", "revision", "url"} <= created.keys()
    assert created["revision"] == 1 and created["url"] == f"/entries/{created['id']}/working-notes"
    assert client.get(created["url"]).status_code == 200
    got = client.get(f"/api/v1/entries/{created['id']}").get_json()
    assert got["body"] == "# Hi\n\ntext" and got["tags"] == ["ml", "gpu"]
    assert got["week"] == "2024-W13" and "<h1" in got["html"]
    r = client.put(f"/api/v1/entries/{created['id']}", json={"body": "changed",
                                                             "base_revision": 1})
    assert r.status_code == 200 and r.get_json()["revision"] == 2
    revs = client.get(f"/api/v1/entries/{created['id']}/revisions").get_json()["revisions"]
    assert [r["number"] for r in revs] == [2, 1]
    r = client.get(f"/api/v1/entries/{created['id']}/revisions/1").get_json()
    assert r["body"] == "# Hi\n\ntext"
    assert client.delete(f"/api/v1/entries/{created['id']}?base_revision=2").status_code == 204
    assert client.get(f"/api/v1/entries/{created['id']}").status_code == 404


def test_stale_put_is_409_with_the_current_text(client, db):
    entry = post(client, {"title": "Shared", "body": "base"}).get_json()
    url = f"/api/v1/entries/{entry['id']}"
    assert client.put(url, json={"body": "phone", "base_revision": 1}).status_code == 200
    r = client.put(url, json={"body": "laptop", "base_revision": 1})
    assert r.status_code == 409
    error = r.get_json()["error"]
    assert error["code"] == "conflict" and error["current"]["body"] == "phone"
    assert error["current"]["revision"] == 2
    assert client.get(url).get_json()["body"] == "phone"
    assert count(db, Entry) == 1 and count(db, Revision) == 2


def test_a_base_revision_ahead_of_the_entry_is_a_bad_input_not_a_conflict(client, db):
    entry = post(client, {"title": "Ahead", "body": "base"}).get_json()
    url = f"/api/v1/entries/{entry['id']}"
    for r in (client.put(url, json={"body": "from the future", "base_revision": 5}),
              client.put(url, json={"body": "below", "base_revision": -1}),
              client.post(f"{url}/restore", json={"revision": 1, "base_revision": 2}),
              client.delete(f"{url}?base_revision=3")):
        assert r.status_code == 422, r.get_json()
        assert r.get_json()["error"]["field"] == "base_revision"
    got = client.get(url).get_json()
    assert (got["body"], got["revision"]) == ("base", 1) and count(db, Revision) == 1


def test_a_hubs_backlinks_come_a_page_at_a_time(client):
    hub = post(client, {"date": "2024-01-01", "title": "Hub", "body": "x"}).get_json()
    sources = [post(client, {"date": f"2024-02-{i + 1:02d}", "title": f"Source {i}",
                             "body": f"[[Hub]] first {i}\n\n[[Hub]] again\n\n[[2024-01-01]]",
                             "status": "draft" if i % 4 == 0 else "published"}).get_json()
               for i in range(10)]
    newest_first = [s["id"] for s in reversed(sources)]
    url = f"/api/v1/entries/{hub['id']}/backlinks"
    seen = []
    for offset in range(0, 12, 3):
        page = client.get(f"{url}?limit=3&offset={offset}").get_json()
        assert page["total"] == 10 and page["limit"] == 3 and page["offset"] == offset
        assert page["has_more"] == (offset + 3 < 10)
        assert all(b["context"] == f"Hub first {b['title'][-1]}"
                   for b in page["backlinks"])  # each source's first link
        seen += [b["id"] for b in page["backlinks"]]
    assert seen == newest_first  # each source once, across the pages, newest first
    whole = client.get(url).get_json()
    assert [b["id"] for b in whole["backlinks"]] == newest_first and not whole["has_more"]
    for bad in ("limit=0", "limit=501", "limit=x", "offset=-1", "offset=1.5"):
        r = client.get(f"{url}?{bad}")
        assert r.status_code == 422, bad
        assert r.get_json()["error"]["field"] == bad.split("=")[0]
    assert client.get("/api/v1/entries/99999/backlinks").status_code == 404

def test_restore_through_the_api(client):
    entry = post(client, {"title": "R", "body": "one"}).get_json()
    url = f"/api/v1/entries/{entry['id']}"
    client.put(url, json={"body": "two", "base_revision": 1})
    r = client.post(url + "/restore", json={"revision": 1, "base_revision": 2})
    assert r.status_code == 200 and r.get_json()["body"] == "one" and r.get_json()["revision"] == 3


def test_week_is_created_on_demand_for_this_week_only(client):
    week = isoweeks.iso_week(isoweeks.today("UTC"))
    r = client.get(f"/api/v1/weeks/{week}")
    assert r.status_code == 200
    letter = r.get_json()["letter"]
    assert letter["kind"] == "week" and "## Experiments" in letter["body"]
    assert client.get(f"/api/v1/weeks/{week}").get_json()["letter"]["id"] == letter["id"]
    assert client.get("/api/v1/weeks/2019-W01").status_code == 404
    assert client.get("/api/v1/weeks/2019-W54").status_code == 422


def test_week_lists_its_entries(client):
    post(client, {"date": "2024-03-26", "title": "Tuesday"})
    post(client, {"date": "2024-04-01", "title": "Next week"})
    client.put("/api/v1/letter-template", json={"template": "## Only"})
    week = isoweeks.iso_week(isoweeks.today("UTC"))
    assert client.get(f"/api/v1/weeks/{week}").get_json()["letter"]["body"] == "## Only"


def test_search_and_list_filters(client):
    post(client, {"date": "2024-03-26", "title": "Bubble math", "body": "pipeline", "tags": ["pp"]})
    post(client, {"date": "2024-04-26", "title": "Other", "body": "pipeline too"})
    r = client.get("/api/v1/search?q=pipeline").get_json()
    assert [h["title"] for h in r["results"]][0] in {"Bubble math", "Other"}
    assert "<mark>" in r["results"][0]["snippet"]
    assert [e["title"] for e in client.get("/api/v1/entries?tag=pp").get_json()["entries"]] == [
        "Bubble math"]
    assert [e["title"] for e in client.get("/api/v1/entries?from=2024-04-01")
            .get_json()["entries"]] == ["Other"]
    r = client.get("/api/v1/search?q=%22open")
    assert r.status_code == 400 and "quote" in r.get_json()["error"]["message"]


def test_openapi_document_lists_the_routes(client):
    doc = client.get("/api/v1/openapi.json").get_json()
    assert doc["openapi"].startswith("3.")
    for path in ("/api/v1/entries", "/api/v1/entries/{entry_id}", "/api/v1/weeks/{week}",
                 "/api/v1/search", "/api/v1/entries/{entry_id}/revisions"):
        assert path in doc["paths"]


BAD_CREATES = [
    ("not json", {"data": "title=x", "content_type": "application/x-www-form-urlencoded"}),
    ("broken json", {"data": "{", "content_type": "application/json"}),
    ("json array", {"data": "[]", "content_type": "application/json"}),
    ("json string", {"data": '"x"', "content_type": "application/json"}),
    ("no title", {"json": {"body": "x"}}),
    ("title not string", {"json": {"title": 5}}),
    ("bad date", {"json": {"title": "t", "date": "2024-13-40"}}),
    ("date wrong type", {"json": {"title": "t", "date": [2024]}}),
    ("tags wrong type", {"json": {"title": "t", "tags": {"a": 1}}}),
    ("bad tag", {"json": {"title": "t", "tags": ["a b c!"]}}),
    ("bad status", {"json": {"title": "t", "status": "public"}}),
    ("unknown field", {"json": {"title": "t", "kind": "week"}}),
    ("huge body", {"json": {"title": "t", "body": "x" * 1_000_001}}),
    ("too many tags", {"json": {"title": "t", "tags": [f"t{i}" for i in range(31)]}}),
    ("lone surrogate", {"json": {"title": "t\ud800"}}),
    ("surrogate bytes", {"data": b'{"title": "t\xed\xa0\x80"}', "content_type": JSON}),
    ("utf-16 body", {"data": '{"title": "t"}'.encode("utf-16"), "content_type": JSON}),
]


@pytest.mark.parametrize("name, kwargs", BAD_CREATES, ids=[b[0] for b in BAD_CREATES])
def test_bad_creates_are_4xx_json_and_change_nothing(client, db, name, kwargs):
    r = client.post("/api/v1/entries", **kwargs)
    assert 400 <= r.status_code < 500
    assert r.get_json()["error"]["message"]
    assert count(db, Entry) == 0 and count(db, Revision) == 0


def test_escaped_text_is_taken_when_it_is_text(client):
    r = client.post("/api/v1/entries", content_type="application/json",
                    data=b'{"title": "\\ud83e\\uddea lab", "body": "a \\\\ud800 in code"}')
    assert r.status_code == 201
    got = client.get(f"/api/v1/entries/{r.get_json()['id']}").get_json()
    assert (got["title"], got["body"]) == ("\U0001f9ea lab", "a \\ud800 in code")


@pytest.mark.parametrize("body", [
    {"body": "x"}, {"body": "x", "base_revision": "1"}, {"body": "x", "base_revision": True},
    {"body": "x", "base_revision": None}, {"title": "", "base_revision": 1},
    {"status": "x", "base_revision": 1}, {"slug": "x", "base_revision": 1},
])
def test_bad_updates_change_nothing(client, body):
    entry = post(client, {"title": "Keep", "body": "kept"}).get_json()
    r = client.put(f"/api/v1/entries/{entry['id']}", json=body)
    assert r.status_code in (400, 422)
    after = client.get(f"/api/v1/entries/{entry['id']}").get_json()
    assert (after["title"], after["body"], after["revision"]) == ("Keep", "kept", 1)


@pytest.mark.parametrize("method, path", [
    ("get", "/api/v1/entries/999"), ("put", "/api/v1/entries/999"),
    ("delete", "/api/v1/entries/999"), ("get", "/api/v1/entries/999/revisions"),
    ("get", "/api/v1/entries/abc"), ("get", "/api/v1/nothing"),
    ("post", "/api/v1/entries/999/restore"), ("post", "/api/v1/entries/999/attachments"),
])
def test_unknown_ids_are_404_json(client, method, path):
    r = getattr(client, method)(path, json={"base_revision": 1, "revision": 1})
    assert r.status_code == 404 and r.get_json()["error"]["code"]


@pytest.mark.parametrize("query", ["limit=0", "limit=x", "limit=100000", "offset=-1"])
def test_bad_paging_is_422(client, query):
    assert client.get(f"/api/v1/entries?{query}").status_code == 422


def test_oversized_request_is_413(client, db):
    r = client.post("/api/v1/entries", data=b"x" * (21 * 1024 * 1024),
                    content_type="application/json")
    assert r.status_code == 413 and count(db, Entry) == 0


def test_attachment_upload_and_safe_serving(client, app):
    entry = post(client, {"title": "Pics"}).get_json()
    url = f"/api/v1/entries/{entry['id']}/attachments"
    r = client.post(url, data={"file": (io.BytesIO(PNG), "../../evil name.png")})
    assert r.status_code == 201
    stored = r.get_json()
    assert stored["markdown"].startswith("![evil-name.png](/attachments/")
    served = client.get(stored["url"])
    assert served.status_code == 200 and served.data == PNG
    assert served.headers["Content-Type"] == "image/png"
    assert "sandbox" in served.headers["Content-Security-Policy"]
    assert served.headers["X-Content-Type-Options"] == "nosniff"
    assert [len(served.headers.getlist(h)) for h in ("Content-Security-Policy",
                                                     "X-Content-Type-Options")] == [1, 1]
    files = list((app.config["DATA_DIR"] / "attachments").rglob("*"))
    assert any(f.name == stored["sha256"] for f in files)
    # the same bytes again are stored once
    client.post(url, data={"file": (io.BytesIO(PNG), "again.png")})
    assert len([f for f in (app.config["DATA_DIR"] / "attachments").rglob(stored["sha256"])]) == 1


def test_svg_is_served_as_an_inert_document(client):
    entry = post(client, {"title": "SVG"}).get_json()
    svg = (b'<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)">'
           b"<script>alert(2)</script></svg>")
    r = client.post(f"/api/v1/entries/{entry['id']}/attachments",
                    data={"file": (io.BytesIO(svg), "x.svg")})
    served = client.get(r.get_json()["url"])
    csp = served.headers["Content-Security-Policy"]
    assert "sandbox" in csp and "script-src" not in csp and "default-src 'none'" in csp


@pytest.mark.parametrize("payload, name, status", [
    (b"<!DOCTYPE html><script>alert(1)</script>", "page.html", 415),
    (b"<html><body>hi</body></html>", "x.png", 415),
    (b"\x7fELF\x02\x01\x01\x00" + b"\x00" * 32, "bin", 415),
    (b"", "empty.txt", 422),
    (b"x" * (10 * 1024 * 1024 + 1), "big.txt", 413),
])
def test_bad_attachments_are_refused_and_nothing_kept(client, db, payload, name, status):
    entry = post(client, {"title": "A"}).get_json()
    r = client.post(f"/api/v1/entries/{entry['id']}/attachments",
                    data={"file": (io.BytesIO(payload), name)})
    assert r.status_code == status
    assert count(db, Attachment) == 0


def test_attachment_without_file_field(client):
    entry = post(client, {"title": "A"}).get_json()
    r = client.post(f"/api/v1/entries/{entry['id']}/attachments", data={"other": "x"})
    assert r.status_code == 422


def test_unknown_attachment_is_404(client):
    assert client.get("/attachments/" + "0" * 64 + "/x.png").status_code == 404
    assert client.get("/attachments/zz/x.png").status_code == 404


def test_errors_are_json_with_code_and_message(client):
    r = client.get("/api/v1/entries/12345")
    body = json.loads(r.data)
    assert set(body["error"]) >= {"code", "message"}
