"""The real server: `commonplace up` (migrations and gunicorn) on a free loopback port, and
`commonplace web` in serve mode with its two doors: the unix socket `tailscale serve`
proxies to (identity headers believed) and the TCP address that runners, scripts, other
local processes and raw TCP forwards reach (tokens only); and from a network namespace of
the test's own in which the web sees a genuinely non-loopback peer."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from app import create_app
from app.notebook import isoweeks
from tests.helpers import AS_OWNER, OWNER, ROOT, VIEWER, add_token, bearer
from tests.tailnet import (
    NETNS_ADDR,
    NETNS_PEER,
    NetnsWebServer,
    WebServer,
    as_serve_sends,
    fetch,
    netns_available,
)


def post_json(url, data, headers=None):
    return fetch(url, method="POST", body=json.dumps(data).encode(),
                 headers={"Content-Type": "application/json", **(headers or {})})


def test_gunicorn_serves_pages_api_and_feed(module_server):
    live_server, data_dir = module_server
    status, headers, body = fetch(live_server + "/healthz")
    assert status == 200 and json.loads(body)["status"] == "ok"
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


def test_concurrent_writers_all_land(module_server):
    """Two gunicorn workers with four threads each, one SQLite writer at a time: every
    acknowledged save is there afterwards, once (bounded: 40 requests over 8 threads). The
    module's server: the other test's entry is not one of these titles."""
    live_server, _ = module_server

    def create(i):
        return post_json(live_server + "/api/v1/entries", {"title": f"Concurrent {i}",
                                                           "body": "x"})[0]

    with ThreadPoolExecutor(max_workers=8) as pool:
        statuses = list(pool.map(create, range(40)))
    assert statuses == [201] * 40
    status, _, body = fetch(live_server + "/api/v1/entries?limit=100&kind=entry")
    titles = [e["title"] for e in json.loads(body)["entries"]]
    assert sorted(t for t in titles if t.startswith("Concurrent ")) == \
        sorted(f"Concurrent {i}" for i in range(40))


# -- serve mode, through the real web -----------------------------------------------------


@pytest.fixture(scope="module")
def serve_web(tmp_path_factory):
    """One serve-mode web for the module (starting one costs seconds of CPU): each test
    sends requests of its own (its own paths in the access log, its own titles) and reads
    only what those left."""
    server = WebServer(tmp_path_factory.mktemp("data"), COMMONPLACE_AUTH="serve",
                       COMMONPLACE_OWNERS=OWNER, COMMONPLACE_VIEWERS=VIEWER,
                       COMMONPLACE_HOSTS="notes.tail1234.ts.net")
    try:
        yield server
    finally:
        server.close()


def test_real_server_serve_mode(serve_web):
    """`commonplace web` under gunicorn, as `tailscale serve` calls it: over its socket."""
    server = serve_web
    serve = as_serve_sends(OWNER, "=?utf-8?q?Ow=C3=B1er?=")
    body = json.dumps({"title": "via serve"}).encode()
    json_type = {"Content-Type": "application/json"}
    status, headers, _ = server.via_serve("/api/v1/entries", {**serve, **json_type},
                                          method="POST", body=body)
    assert status == 201
    assert headers["Strict-Transport-Security"] == "max-age=31536000"
    status, headers, page = server.via_serve("/", serve)
    assert status == 200 and f"Signed in as {OWNER}".encode() in page
    assert "script-src 'self'" in headers["Content-Security-Policy"]
    assert headers["X-Frame-Options"] == "DENY"

    viewer = as_serve_sends(VIEWER)
    assert server.via_serve("/api/v1/entries", {**viewer, **json_type}, method="POST",
                            body=body)[0] == 403
    assert server.via_serve("/", as_serve_sends(funnel=True))[0] == 403
    status, _, answer = server.via_serve("/api/v1/entries", as_serve_sends("eve@example.com"))
    assert status == 403 and json.loads(answer)["error"]["seen_as"] == "eve@example.com"
    status, _, _ = server.via_serve("/api/v1/entries", {**serve, **json_type, "Origin":
                                    "https://evil.example"}, method="POST", body=body)
    assert status == 403  # cross-site, judged against the name serve says the browser used
    # serve names the host the browser asked for; a name not ours is refused
    assert server.via_serve("/", as_serve_sends(OWNER, host="evil.example"))[0] == 400
    # gunicorn's own limits, before the app: a header line far over 8 KB
    status, _, _ = server.via_serve("/", {**serve, "X-Big": "y" * 20000})
    assert status in (400, 431)
    status, _, answer = server.via_serve("/api/v1/entries?kind=entry&limit=500", serve)
    # the owner's one save; neither the viewer's nor the cross-site one made an entry
    assert [e["title"] for e in json.loads(answer)["entries"]].count("via serve") == 1
    # the access log names the tailnet address and login serve forwarded
    log = server.log_path.read_text()
    assert "100.101.102.103 fwd=100.101.102.103 user=owner@example.com" in log
    # only this user may connect to the socket (tailscaled, as root, still can)
    assert stat.S_IMODE(os.stat(server.socket_path).st_mode) & 0o077 == 0


@pytest.mark.parametrize("n, headers", list(enumerate([
    AS_OWNER,  # what any local process, or a runner sharing the web's loopback, can type
    as_serve_sends(OWNER),  # serve's full set of headers, forged
    as_serve_sends(OWNER, host="127.0.0.1"),
])))
def test_identity_headers_on_the_tcp_address_are_nobody(serve_web, n, headers):
    """Runners, scripts and every process on the machine reach the TCP address; none of
    them is anybody by typing serve's headers there, and nothing forwarded is believed."""
    path = f"/api/v1/entries?door=tcp{n}"
    status, _, body = fetch(serve_web.base + path, headers=headers)
    assert status == 403
    assert "COMMONPLACE_SERVE_SOCKET" in json.loads(body)["error"]["message"]
    # the access log says who the web took the caller for: nobody, whatever was claimed
    line = wait_for_log_line(serve_web, path + " ")
    assert "user=- " in line and OWNER not in line
    # nor does X-Forwarded-Host name a trusted host for a rebound page here
    status, _, _ = fetch(serve_web.base + "/healthz", headers={
        "Host": "evil.example", "X-Forwarded-Host": "notes.tail1234.ts.net"})
    assert status == 400


def wait_for_log_line(server, marker: str) -> str:
    """The access log line with `marker` (gunicorn writes it just after the response)."""
    for _ in range(100):
        for line in server.log_path.read_text().splitlines():
            if marker in line:
                return line
        threading.Event().wait(0.1)
    raise AssertionError(f"no access log line with {marker}")


def test_a_runner_sharing_the_loopback_is_only_a_runner(serve_web):
    """compose and `commonplace up` put the runner on the web's loopback. With its token it
    reaches the runner API over TCP; with serve's headers it reaches nothing more."""
    data_dir = Path(serve_web.env["COMMONPLACE_DATA_DIR"])
    app = create_app({"DATA_DIR": data_dir, "DATABASE_URL":
                      f"sqlite:///{data_dir}/commonplace.db", "AUTH_MODE": "serve"})
    secret = add_token(app.extensions["db"], "gpu-box", "runner")
    app.extensions["db"].engine.dispose()
    runner = {**bearer(secret), "Content-Type": "application/json"}
    status, _, _ = fetch(serve_web.base + "/api/v1/runner/register", method="POST",
                         headers=runner, body=json.dumps({"labels": {}}).encode())
    assert status == 200
    for headers in ({**AS_OWNER}, {**runner, **AS_OWNER}):
        status, _, _ = fetch(serve_web.base + "/api/v1/entries", method="POST",
                             headers={**headers, "Content-Type": "application/json"},
                             body=json.dumps({"title": "owned"}).encode())
        assert status == 403
    status, _, body = serve_web.via_serve("/api/v1/entries?kind=entry&limit=500",
                                          as_serve_sends(OWNER))
    assert "owned" not in [e["title"] for e in json.loads(body)["entries"]]


def test_a_raw_tcp_forward_brings_no_identity(serve_web):
    """`tailscale serve --tcp`, `ssh -L` or socat forwarding bytes to the web's port: the
    web sees a local TCP client, whatever headers travel inside."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def forward():  # one connection, both ways, until either side closes
        client, _ = listener.accept()
        with client, socket.create_connection(("127.0.0.1", serve_web.port)) as upstream:
            def pump(src, dst):
                while data := src.recv(65536):
                    dst.sendall(data)
                dst.shutdown(socket.SHUT_WR)
            back = threading.Thread(target=pump, args=(upstream, client), daemon=True)
            back.start()
            pump(client, upstream)
            back.join(timeout=30)

    thread = threading.Thread(target=forward, daemon=True)
    thread.start()
    try:
        status, _, body = fetch(f"http://127.0.0.1:{port}/api/v1/entries",
                                headers={**as_serve_sends(OWNER), "Host": "127.0.0.1",
                                         "Connection": "close"})
        assert status == 403
    finally:
        listener.close()
        thread.join(timeout=30)


def test_web_refuses_a_serve_socket_path_too_long_for_a_socket(data_dir):
    env = {**os.environ, "COMMONPLACE_DATA_DIR": str(data_dir), "COMMONPLACE_AUTH": "serve",
           "COMMONPLACE_OWNERS": OWNER, "COMMONPLACE_TIMEZONE": "UTC",
           "COMMONPLACE_SERVE_SOCKET": "/tmp/" + "x" * 120 + "/web.sock"}
    out = subprocess.run([sys.executable, "-m", "app.cli", "web"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "longer than a unix socket path" in out.stderr


needs_netns = pytest.mark.skipif(not netns_available(),
                                 reason="cannot make a network namespace here (unshare -n)")


@needs_netns
def test_real_server_ignores_identity_headers_from_a_non_loopback_peer(data_dir):
    """The web bound to 100.64.0.1 (whatever the reason: a misconfigured bind) sees a
    direct client as 100.64.0.1, and no header it sends makes it anybody."""
    server = NetnsWebServer(data_dir, COMMONPLACE_AUTH="serve", COMMONPLACE_OWNERS=OWNER,
                            COMMONPLACE_HOSTS=NETNS_ADDR,
                            COMMONPLACE_SERVE_SOCKET=str(data_dir / "web.sock"))
    try:
        spoofed = {**AS_OWNER, "X-Forwarded-For": "127.0.0.1", "Content-Type": "application/json"}
        status, text = server.request("/api/v1/entries", method="POST", headers=spoofed,
                                      body=json.dumps({"title": "spoofed"}))
        assert status == 403, text
        assert json.loads(text)["error"]["seen_as"] == f"nobody (a direct connection from " \
                                                       f"{NETNS_PEER})"
        status, text = server.request("/api/v1/entries", headers=AS_OWNER)
        assert status == 403
    finally:
        server.close()
