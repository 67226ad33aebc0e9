"""Text answers compressed by Accept-Encoding and tagged for conditional GETs
(app/web/compression.py): brotli or gzip by q-value, Vary on each, a strong ETag per reader
and per encoding, 304 for a tag the reader holds, nothing done to small, streamed or
already-compressed bodies; and through real gunicorn, a HEAD and a 304 as a browser sees them."""

from __future__ import annotations

import gzip
import http.client

import brotli
import pytest

from tests.helpers import (
    AS_OWNER,
    AS_VIEWER,
    OWNER,
    add_token,
    bearer,
    create_entry,
    edit_entry,
)

LONG_BODY = "\n\n".join(f"Paragraph {n}: the pipeline bubble shrinks with more microbatches."
                        for n in range(80))


def decoded(response) -> bytes:
    coding = response.headers.get("Content-Encoding")
    data = response.get_data()
    return {"br": brotli.decompress, "gzip": gzip.decompress}.get(coding, lambda b: b)(data)


@pytest.fixture
def page(client):
    entry_url = f"/entries/{create_entry(client, title='Long note', body=LONG_BODY)}"
    return client.get(entry_url, follow_redirects=True).request.path


@pytest.mark.parametrize(("accept", "coding"), [
    ("gzip, deflate, br, zstd", "br"),
    ("br", "br"),
    ("gzip", "gzip"),
    ("br;q=0.5, gzip;q=1.0", "gzip"),
    ("br;q=0, gzip", "gzip"),
    ("*", "br"),
    ("*;q=0.5, br;q=0", "gzip"),
    ("gzip;q=0, br;q=0", None),
    ("identity", None),
    ("deflate", None),
    ("", None),
    (";;q=,,br;q=nonsense", None),  # unreadable: answered as is, never an error
])
def test_the_encoding_follows_accept_encoding_and_its_q_values(client, page, accept, coding):
    plain = client.get(page)
    assert plain.status_code == 200 and "Content-Encoding" not in plain.headers
    response = client.get(page, headers={"Accept-Encoding": accept})
    assert response.status_code == 200
    assert response.headers.get("Content-Encoding") == coding
    assert "Accept-Encoding" in response.headers["Vary"]
    assert decoded(response) == plain.get_data()
    if coding:
        assert len(response.get_data()) < len(plain.get_data()) / 3
        assert int(response.headers["Content-Length"]) == len(response.get_data())


def test_each_encoding_has_its_own_strong_etag_and_a_held_one_gets_304(client, page):
    tags = {}
    for accept in ("br", "gzip", "identity"):
        response = client.get(page, headers={"Accept-Encoding": accept})
        tag = response.headers["ETag"]
        assert not tag.startswith("W/")
        assert response.headers["Cache-Control"] == "private, no-cache"
        tags[accept] = tag
        again = client.get(page, headers={"Accept-Encoding": accept, "If-None-Match": tag})
        assert again.status_code == 304 and again.get_data() == b""
        assert again.headers["ETag"] == tag
        assert "Accept-Encoding" in again.headers["Vary"]
    assert len(set(tags.values())) == 3
    # a tag of another encoding names other bytes: the page is sent
    other = client.get(page, headers={"Accept-Encoding": "gzip", "If-None-Match": tags["br"]})
    assert other.status_code == 200 and other.headers["Content-Encoding"] == "gzip"


def test_a_changed_page_gets_a_new_tag(client, page):
    first = client.get(page).headers["ETag"]
    entry_id = int(page.split("/")[2])
    assert edit_entry(client, entry_id, 1, title="Long note", body=LONG_BODY + "\n\nMore.") \
        .status_code == 303
    second = client.get(page)
    assert second.headers["ETag"] != first
    assert client.get(page, headers={"If-None-Match": first}).status_code == 200


def test_one_readers_tag_never_matches_anothers_page(served):
    response = served.client.get("/", headers=AS_OWNER)
    owners = response.headers["ETag"]
    viewers = served.client.get("/", headers=AS_VIEWER).headers["ETag"]
    assert owners != viewers
    held = served.client.get("/", headers={**AS_VIEWER, "If-None-Match": owners})
    assert held.status_code == 200 and OWNER not in held.get_data(as_text=True)
    assert held.headers["Cache-Control"].startswith("private")


def test_json_and_atom_are_compressed_too(client, db):
    for n in range(12):
        create_entry(client, title=f"Published {n}", body=LONG_BODY, status="published")
    token = add_token(db, "reader", "feed")
    for path, headers in [("/api/v1/entries", {}), (f"/feed.atom?token={token}", {}),
                          ("/api/v1/openapi.json", {})]:
        response = client.get(path, headers={**headers, "Accept-Encoding": "br"})
        assert response.status_code == 200, path
        assert response.headers["Content-Encoding"] == "br", path
        assert brotli.decompress(response.get_data()) == client.get(path).get_data()


def test_small_bodies_writes_and_files_pass_as_they_are(client, db):
    small = client.get("/healthz", headers={"Accept-Encoding": "br"})
    assert small.status_code == 200 and "Content-Encoding" not in small.headers
    token = add_token(db, "writer", "owner")
    made = client.post("/api/v1/entries", json={"title": "Posted", "body": LONG_BODY},
                       headers={**bearer(token), "Accept-Encoding": "br"})
    assert made.status_code == 201
    assert "Content-Encoding" not in made.headers and "ETag" not in made.headers
    icon = client.get("/static/icon-512.png", headers={"Accept-Encoding": "br"})
    assert icon.status_code == 200 and "Content-Encoding" not in icon.headers


def test_a_no_store_answer_gets_no_tag(client):
    create_entry(client, title="Pipelines")
    offered = client.get("/api/v1/complete?kind=link&prefix=Pi")
    assert offered.status_code == 200 and "ETag" not in offered.headers
    assert offered.headers["Cache-Control"] == "private, no-store"


def test_real_gunicorn_sends_compressed_pages_heads_and_304s(live_server):
    host, port = live_server.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request("GET", "/calculator", headers={"Accept-Encoding": "gzip, br"})
        response = conn.getresponse()
        body = response.read()
        assert response.status == 200 and response.getheader("Content-Encoding") == "br"
        plain = brotli.decompress(body)
        assert plain.startswith(b"<!doctype html>")
        tag = response.getheader("ETag")
        conn.request("HEAD", "/calculator", headers={"Accept-Encoding": "gzip, br"})
        head = conn.getresponse()
        assert head.read() == b"" and head.getheader("ETag") == tag
        assert int(head.getheader("Content-Length")) == len(body)
        conn.request("GET", "/calculator",
                     headers={"Accept-Encoding": "gzip, br", "If-None-Match": tag})
        cached = conn.getresponse()
        assert cached.status == 304 and cached.read() == b""
        conn.request("GET", "/calculator")  # the same connection still serves: no stray body
        assert conn.getresponse().read() == plain
    finally:
        conn.close()
