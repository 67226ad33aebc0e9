"""The real server: `commonplace up` (migrations and gunicorn) on a free loopback port, and
`commonplace web` in serve mode as `tailscale serve` calls it, including from a network
namespace of the test's own in which the web sees a genuinely non-loopback peer."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from app.notebook import isoweeks
from tests.helpers import AS_OWNER, AS_VIEWER, OWNER, VIEWER
from tests.tailnet import NETNS_ADDR, NetnsWebServer, WebServer, fetch, netns_available


def post_json(url, data, headers=None):
    return fetch(url, method="POST", body=json.dumps(data).encode(),
                 headers={"Content-Type": "application/json", **(headers or {})})


def test_gunicorn_serves_pages_api_and_feed(live_server, data_dir):
    status, headers, body = fetch(live_server + "/healthz")
    assert status == 200 and json.loads(body) == {"status": "ok"}
    # `up` made this week's letter and the database in the data directory
    week = isoweeks.iso_week(isoweeks.today("UTC"))
    status, _, body = fetch(f"{live_server}/api/v1/weeks/{week}")
    assert status == 200 and json.loads(body)["letter"]["kind"] == "week"
    assert (data_dir / "commonplace.db").exists()
    status, _, body = post_json(live_server + "/api/v1/entries", {"title": "Over the wire",
                                                                  "body": "served by gunicorn"})
    assert status == 201
    created = json.loads(body)
    for path in ("/", created["url"], f"/weeks/{week}", "/sitemap", "/search?q=gunicorn",
                 "/feed.atom"):
        status, headers, body = fetch(live_server + path)
        assert status == 200, path
        assert "script-src 'self'" in headers["Content-Security-Policy"]
    status, _, body = fetch(live_server + "/search?q=gunicorn")
    assert b"Over the wire" in body
    status, _, body = fetch(live_server + "/feed.atom")
    assert b"Over the wire" in body
    assert (data_dir / "notes").rglob("*-over-the-wire.md")
    status, _, body = post_json(live_server + "/api/v1/entries", {"title": ""})
    assert status == 422


def test_concurrent_writers_all_land(live_server):
    """Two gunicorn workers with four threads each, one SQLite writer at a time: every
    acknowledged save is there afterwards (bounded: 40 requests over 8 threads)."""
    def create(i):
        return post_json(live_server + "/api/v1/entries", {"title": f"Note {i}", "body": "x"})[0]

    with ThreadPoolExecutor(max_workers=8) as pool:
        statuses = list(pool.map(create, range(40)))
    assert statuses == [201] * 40
    status, _, body = fetch(live_server + "/api/v1/entries?limit=100&kind=entry")
    assert len(json.loads(body)["entries"]) == 40


# -- serve mode, through the real web -----------------------------------------------------


@pytest.fixture
def serve_web(data_dir):
    server = WebServer(data_dir, COMMONPLACE_AUTH="serve", COMMONPLACE_OWNERS=OWNER,
                       COMMONPLACE_VIEWERS=VIEWER, COMMONPLACE_HOSTS="notes.tail1234.ts.net")
    try:
        yield server
    finally:
        server.close()


def test_real_server_serve_mode(serve_web):
    """`commonplace web` under gunicorn, as `tailscale serve` would call it."""
    base = serve_web.base
    serve = {**AS_OWNER, "X-Forwarded-For": "100.101.102.103", "X-Forwarded-Proto": "https",
             "Host": "notes.tail1234.ts.net", "Tailscale-User-Name": "=?utf-8?q?Ow=C3=B1er?="}
    status, headers, body = post_json(base + "/api/v1/entries", {"title": "via serve"}, serve)
    assert status == 201
    assert headers["Strict-Transport-Security"] == "max-age=31536000"
    status, headers, body = fetch(base + "/", headers=serve)
    assert status == 200 and f"Signed in as {OWNER}".encode() in body
    assert "script-src 'self'" in headers["Content-Security-Policy"]
    assert headers["X-Frame-Options"] == "DENY"

    assert post_json(base + "/api/v1/entries", {"title": "v"}, AS_VIEWER)[0] == 403
    assert fetch(base + "/", headers={**serve, "Tailscale-Funnel-Request": "?1"})[0] == 403
    status, _, body = fetch(base + "/api/v1/entries",
                            headers={"Tailscale-User-Login": "eve@example.com"})
    assert status == 403 and json.loads(body)["error"]["seen_as"] == "eve@example.com"
    status, _, _ = post_json(base + "/api/v1/entries", {"title": "csrf"},
                             {**serve, "Sec-Fetch-Site": "cross-site"})
    assert status == 403
    status, _, _ = fetch(base + "/", headers={**AS_OWNER, "Host": "evil.example"})
    assert status == 400
    # gunicorn's own limits, before the app: a header line far over 8 KB
    status, _, _ = fetch(base + "/", headers={**AS_OWNER, "X-Big": "y" * 20000})
    assert status in (400, 431)
    status, _, body = fetch(base + "/api/v1/entries?kind=entry", headers=AS_OWNER)
    assert [e["title"] for e in json.loads(body)["entries"]] == ["via serve"]
    # the access log names the tailnet address and login serve forwarded
    log = serve_web.log_path.read_text()
    assert "fwd=100.101.102.103 user=owner@example.com" in log


needs_netns = pytest.mark.skipif(not netns_available(),
                                 reason="cannot make a network namespace here (unshare -n)")


@needs_netns
def test_real_server_ignores_identity_headers_from_a_non_loopback_peer(data_dir):
    """The web bound to 100.64.0.1 (whatever the reason: a misconfigured bind) sees a
    direct client as 100.64.0.1, and no header it sends makes it anybody."""
    server = NetnsWebServer(data_dir, COMMONPLACE_AUTH="serve", COMMONPLACE_OWNERS=OWNER,
                            COMMONPLACE_HOSTS=NETNS_ADDR)
    try:
        spoofed = {**AS_OWNER, "X-Forwarded-For": "127.0.0.1", "Content-Type": "application/json"}
        status, text = server.request("/api/v1/entries", method="POST", headers=spoofed,
                                      body=json.dumps({"title": "spoofed"}))
        assert status == 403, text
        assert json.loads(text)["error"]["seen_as"] == f"nobody (a direct connection from " \
                                                       f"{NETNS_ADDR})"
        status, text = server.request("/api/v1/entries", headers=AS_OWNER)
        assert status == 403
    finally:
        server.close()
