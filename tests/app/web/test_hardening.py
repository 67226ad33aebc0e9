"""What every request is checked for and every response carries (app.web.hardening, and the
cross-site check in app.web.auth.policy): writes from other sites refused, only trusted Host
names, the security headers on every page and error, body sizes, where the web may listen."""

from __future__ import annotations

import functools
import io
import itertools
import socket
import subprocess
import sys
import threading
import time

import pytest
from werkzeug.exceptions import ClientDisconnected, RequestTimeout

from app import config, port_holder
from app.models import Entry
from app.web import bodies, hardening
from tests.helpers import AS_OWNER, OWNER, ROOT, add_token, bearer, count
from tests.tailnet import notebook_state

# -- cross-site writes --------------------------------------------------------------------


SITES = [None, "same-origin", "none", "same-site", "cross-site"]
ORIGINS = [None, "http://localhost", "https://localhost", "http://localhost:8080",
           "https://evil.example", "null"]


def csrf_oracle(method: str, site, origin, token: bool, cookie: bool) -> bool:
    """True if the request should be refused as cross-site (written apart from the code:
    datasette's csrf.py / Go's CrossOriginProtection rules)."""
    if method in ("GET", "HEAD"):
        return False
    if token and not cookie:
        return False
    if site is not None:
        return site not in ("same-origin", "none")
    return origin is not None and origin != "http://localhost"


def test_cross_site_truth_table(make_app, data_dir):
    """Every combination of method, Sec-Fetch-Site, Origin, bearer token and cookie, on the
    API: a refusal is a 403 that says so and changes nothing; an accepted request goes on to
    the view (which finds the body invalid, so nothing is written either way)."""
    app = make_app()  # dev mode: loopback is the owner, the most ambient identity there is
    secret = add_token(app.extensions["db"], "cli", "owner")
    client = app.test_client()
    before = notebook_state(app.extensions["db"], data_dir)
    calls = {"GET": ("get", "/api/v1/entries", 200), "POST": ("post", "/api/v1/entries", 422),
             "PUT": ("put", "/api/v1/entries/999", 404),
             "DELETE": ("delete", "/api/v1/entries/999", 404)}
    checked = 0
    for method, site, origin, token, cookie in itertools.product(
            calls, SITES, ORIGINS, (False, True), (False, True)):
        headers = {}
        if site:
            headers["Sec-Fetch-Site"] = site
        if origin:
            headers["Origin"] = origin
        if token:
            headers.update(bearer(secret))
        # the test client sends the Cookie header from its own jar
        if cookie:
            client.set_cookie("theme", "dark")
        else:
            client.delete_cookie("theme")
        verb, path, accepted = calls[method]
        r = getattr(client, verb)(path, json={"title": ""}, headers=headers)
        refused = csrf_oracle(method, site, origin, token, cookie)
        expected = 403 if refused else accepted
        assert r.status_code == expected, (method, site, origin, token, cookie, r.get_json())
        if refused:
            assert r.get_json()["error"]["message"] == "cross-site request refused"
        checked += 1
    assert checked == 4 * 5 * 6 * 2 * 2
    assert notebook_state(app.extensions["db"], data_dir) == before


@pytest.mark.parametrize("method, path, kwargs", [
    ("post", "/entries/new", {"data": {"title": "csrf", "date": "2024-03-27"}}),
    ("post", "/settings/template", {"data": {"template": "## pwned"}}),
    ("put", "/api/v1/letter-template", {"json": {"template": "## pwned"}}),
    ("post", "/api/v1/entries", {"json": {"title": "csrf"}}),
])
def test_cross_site_writes_with_identity_headers_are_refused(served, data_dir, method, path,
                                                             kwargs):
    """Identity headers are ambient, like cookies: a page elsewhere must not use them."""
    client = served.client
    before = notebook_state(served.db, data_dir)
    for extra in ({"Sec-Fetch-Site": "cross-site"}, {"Origin": "https://evil.example"}):
        r = getattr(client, method)(path, headers={**AS_OWNER, **extra}, **kwargs)
        assert r.status_code == 403
    assert notebook_state(served.db, data_dir) == before


@pytest.mark.parametrize("headers", [
    {"Sec-Fetch-Site": "cross-site"}, {"Sec-Fetch-Site": "same-site"},
    {"Origin": "https://evil.example"}, {"Origin": "null"},
])
def test_cross_site_writes_are_refused(client, db, headers):
    r = client.post("/api/v1/entries", json={"title": "csrf"}, headers=headers)
    assert r.status_code == 403 and count(db, Entry) == 0


def test_same_origin_writes_pass(client):
    r = client.post("/api/v1/entries", json={"title": "ok"},
                    headers={"Origin": "http://localhost", "Sec-Fetch-Site": "same-origin"})
    assert r.status_code == 201


def test_origin_must_match_the_scheme_serve_reports(served):
    client = served.client
    https = {**AS_OWNER, "X-Forwarded-Proto": "https", "Host": "localhost"}
    r = client.post("/api/v1/entries", json={"title": "ok"},
                    headers={**https, "Origin": "https://localhost"})
    assert r.status_code == 201
    r = client.post("/api/v1/entries", json={"title": "no"},
                    headers={**https, "Origin": "http://localhost"})
    assert r.status_code == 403


# -- hosts --------------------------------------------------------------------------------


@pytest.mark.parametrize("host", ["evil.example", "127.0.0.1.nip.io", "notes.tail9999.ts.net",
                                  "localhost.evil.example:8000"])
def test_untrusted_host_is_refused(served, host):
    client = served.client
    r = client.post("/api/v1/entries", json={"title": "rebound"},
                    headers={**AS_OWNER, "Host": host})
    assert r.status_code == 400 and count(served.db, Entry) == 0
    # on serve's socket the Host is always "localhost" and the name the browser used comes
    # as X-Forwarded-Host (set by serve): that is the name checked. (On the TCP address
    # X-Forwarded-Host is not believed: test_server.py.)
    r = client.get("/api/v1/entries", headers={**AS_OWNER, "Host": "localhost",
                                                "X-Forwarded-Host": host})
    assert r.status_code == 400


def test_tailnet_names_from_config_are_trusted(make_app, monkeypatch):
    monkeypatch.setenv("COMMONPLACE_HOSTS", "Notes.tail1234.ts.net, notes")
    hosts = config.from_environment()["TRUSTED_HOSTS"]
    assert hosts == config.trusted_hosts(["notes.tail1234.ts.net", "notes"])
    app = make_app(AUTH_MODE="serve", OWNERS=[OWNER], TRUSTED_HOSTS=hosts)
    client = app.test_client()
    for host in ("notes.tail1234.ts.net", "notes", "localhost:8000", "127.0.0.1:8000"):
        assert client.get("/api/v1/entries", headers={**AS_OWNER, "Host": host}).status_code \
            == 200, host
    assert client.get("/api/v1/entries", headers={**AS_OWNER, "Host": "other.tail1234.ts.net"}
                      ).status_code == 400


# -- how long a request may hold a thread ----------------------------------------------------


def test_long_polls_per_worker_one_per_caller():
    polls = hardening.LongPolls(limit=2)
    assert polls.take("token:a") and not polls.take("token:a")  # one per runner
    assert polls.take("token:b") and not polls.take("token:c")  # two per worker
    polls.give_back("token:a")
    assert polls.take("token:c") and not polls.take("token:a")
    polls.give_back("token:b")
    assert polls.take("token:a")


def test_a_long_poll_over_the_budget_is_429_at_once(make_app):
    """Checked after the access policy: a caller let in, over the budget, is told when to
    come back (as an honest agent then does); the lease view never runs."""
    app = make_app(AUTH_MODE="serve", OWNERS=[OWNER], LONG_POLLS_PER_WORKER=1)
    first = add_token(app.extensions["db"], "gpu-1", "runner")
    second = add_token(app.extensions["db"], "gpu-2", "runner")
    client = app.test_client()
    for secret in (first, second):
        r = client.post("/api/v1/runner/register", json={"labels": {}}, headers=bearer(secret))
        assert r.status_code == 200
    assert app.extensions["long_polls"].take("token:gpu-1")  # gpu-1 is waiting elsewhere
    for secret in (first, second):
        r = client.post("/api/v1/runner/lease", json={"wait": 0}, headers=bearer(secret))
        assert r.status_code == 429 and r.headers["Retry-After"] == "5"
        assert r.get_json()["error"]["code"] == "busy"
    app.extensions["long_polls"].give_back("token:gpu-1")
    r = client.post("/api/v1/runner/lease", json={"wait": 0}, headers=bearer(second))
    assert r.status_code == 204
    # the slot came back when that poll ended: it can be taken again
    assert app.extensions["long_polls"].take("token:gpu-2")
    # nobody who was refused at the door holds a slot
    r = client.post("/api/v1/runner/lease", json={"wait": 0})
    assert r.status_code == 403


@pytest.mark.parametrize("reads", [
    lambda body: body.read(), lambda body: [body.read(4) for _ in range(6)],
    lambda body: body.read(None),
    lambda body: [body.readline() for _ in range(3)], lambda body: list(body),
])
def test_a_body_shorter_than_it_said_raises_and_never_reads_as_a_short_body(reads):
    body = bodies.CountedBody(io.BytesIO(b"title=Ha"), length=20)
    with pytest.raises(ClientDisconnected):
        reads(body)
        reads(body)
    cut = bodies.CountedBody(io.BytesIO(b"title=Ha"), length=20)
    cut.timed_out = True  # what the watcher marks before it stops reading
    with pytest.raises(RequestTimeout):
        reads(cut)
        reads(cut)


def test_a_whole_body_reads_through_and_counts():
    data = bytes(range(256)) * 1000  # several of CountedBody's pieces
    body = bodies.CountedBody(io.BytesIO(data), length=len(data))
    assert body.read(10) == data[:10] and not body.done
    assert body.read() == data[10:] and body.done and body.received == len(data)
    assert body.read() == b""
    chunked = bodies.CountedBody(io.BytesIO(b"a\nb"), length=None)
    assert chunked.readline() == b"a\n" and chunked.read() == b"b" and chunked.done


@pytest.mark.parametrize("reads", [lambda body: body.read(), lambda body: list(body)])
def test_a_slot_for_an_arriving_body_is_given_back_once_it_has_arrived(reads):
    """The slot counts bodies still arriving: a body read whole gives it back before the
    app goes on to save it, and only once, however often the request lets go of it."""
    slots = bodies.Slots(limit=1, per_holder=1)
    assert slots.take("script")
    body = bodies.CountedBody(io.BytesIO(b"line\n" * 3), length=15)
    body.hold(functools.partial(slots.give_back, "script"))
    body.read(4)
    assert not slots.take("other")  # still arriving: the one slot is held
    reads(body)
    assert slots.take("other")
    body.let_go()  # the request's teardown
    assert not slots.take("third")


# -- headers and sizes --------------------------------------------------------------------


def _get_paths(app, entry_id: int) -> list[str]:
    """A concrete URL for every GET route the app has."""
    values = {"entry_id": entry_id, "slug": "x", "week": "2024-W13", "tag": "gpu",
              "sha256": "0" * 64, "name": "x.png", "filename": "app.css", "number": 1}
    paths = []
    for rule in app.url_map.iter_rules():
        if "GET" in rule.methods:
            args = {k: values.get(k, 1) for k in rule.arguments}  # new routes: ids
            paths.append(rule.build(args, append_unknown=False)[1])
    return sorted(set(paths))


def test_every_page_and_error_carries_the_security_headers(served):
    client = served.client
    created = client.post("/api/v1/entries", json={"title": "h"}, headers=AS_OWNER)
    paths = _get_paths(served.app, created.get_json()["id"])
    assert len(paths) >= 20
    for path in [*paths, "/no/such/page"]:
        for headers in (AS_OWNER, {}, {"Tailscale-User-Login": "eve@example.com"}):
            r = client.get(path, headers=headers)
            csp = r.headers.get("Content-Security-Policy", "")
            assert "script-src 'self'" in csp or "sandbox" in csp, (path, r.status_code)
            assert "unsafe-inline" not in csp and "frame-ancestors 'none'" in csp or \
                "sandbox" in csp
            assert r.headers["X-Content-Type-Options"] == "nosniff", path
            assert r.headers["X-Frame-Options"] == "DENY", path
            assert r.headers["Referrer-Policy"] == "same-origin", path
            assert "Strict-Transport-Security" not in r.headers  # plain http here
            # once each: a header a view set itself (an inert file's CSP) is not doubled
            assert all(len(r.headers.getlist(name)) == 1
                       for name, _ in hardening.FIXED_HEADERS), path


def test_every_response_carries_the_security_headers(client):
    for path in ("/", "/api/v1/entries", "/healthz", "/api/v1/nothing", "/feed.atom"):
        r = client.get(path)
        assert "script-src 'self'" in r.headers["Content-Security-Policy"]
        assert r.headers["X-Content-Type-Options"] == "nosniff"
        assert r.headers["X-Frame-Options"] == "DENY"


def test_hsts_only_over_https(served):
    client = served.client
    r = client.get("/", headers={**AS_OWNER, "X-Forwarded-Proto": "https"})
    assert r.headers["Strict-Transport-Security"] == "max-age=31536000"
    assert "Strict-Transport-Security" not in client.get("/", headers=AS_OWNER).headers


def test_oversized_bodies_are_413_and_change_nothing(served, data_dir):
    client = served.client
    before = notebook_state(served.db, data_dir)
    big = b"x" * (served.app.config["MAX_CONTENT_LENGTH"] + 1)
    for path, ctype in (("/api/v1/entries", "application/json"),
                        ("/entries/new", "application/x-www-form-urlencoded"),
                        ("/settings/template", "multipart/form-data; boundary=x")):
        r = client.post(path, data=big, content_type=ctype, headers=AS_OWNER)
        assert r.status_code == 413, path
    assert notebook_state(served.db, data_dir) == before


# -- what the web may listen on -----------------------------------------------------------


@pytest.mark.parametrize("bind, mode, allow, refused", [
    ("127.0.0.1:8000", "serve", False, False), ("localhost:8000", "dev", False, False),
    ("[::1]:8000", "serve", False, False), ("unix:/run/commonplace.sock", "serve", False, False),
    ("0.0.0.0:8000", "serve", False, True), (":8000", "serve", False, True),
    ("100.64.0.1:8000", "whois", False, True), ("100.64.0.1:8000", "whois", True, False),
    ("0.0.0.0:8000", "dev", True, True), ("notes.example:8000", "serve", False, True),
])
def test_bind_policy(bind, mode, allow, refused):
    assert (port_holder.bind_problem(bind, mode, allow) is not None) == refused


@pytest.mark.parametrize("bind, mode", [("0.0.0.0:18080", "serve"), (":18080", "whois"),
                                        ("0.0.0.0:18080", "dev")])
def test_web_refuses_a_non_loopback_bind_and_says_why(data_dir, bind, mode):
    env = {"PATH": "/usr/bin:/bin", "HOME": str(data_dir), "COMMONPLACE_DATA_DIR": str(data_dir),
           "COMMONPLACE_BIND": bind, "COMMONPLACE_AUTH": mode, "COMMONPLACE_OWNERS": OWNER,
           "COMMONPLACE_TIMEZONE": "UTC"}
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", "web"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:  # it started serving: the refusal failed
            proc.kill()
            proc.wait()
    assert proc.returncode == 2
    assert "refusing to listen on" in err
    assert ("--allow-non-loopback" in err) or ("dev mode" in err)


def test_a_body_that_arrived_whole_is_never_cut_off_however_late_it_is_read():
    """Only time spent waiting for the client counts against a body: an app that gets to a
    body late (busy elsewhere) reads all of it, even past the grace, on a real connection
    (a body larger than the sockets' buffers, so the client's send waits on the app)."""
    data = b"x" * 8_000_000
    listener = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(listener.getsockname())
    conn, _ = listener.accept()
    sender = threading.Thread(target=client.sendall, args=(data,), daemon=True)
    sender.start()
    got = []

    def late_app(environ, start_response):
        time.sleep(1.0)  # busy elsewhere (a locked database) for many watcher ticks
        got.append(environ["wsgi.input"].read())
        start_response("200 OK", [])
        return [b""]

    slow = bodies.SlowBodies(late_app, grace=0.05, min_rate=1024 * 1024, tick=0.01)
    try:
        environ = {"gunicorn.socket": conn, "wsgi.input": conn.makefile("rb"),
                   "CONTENT_LENGTH": str(len(data))}
        slow(environ, lambda status, headers, exc_info=None: None)
        assert got == [data]
    finally:
        sender.join(timeout=30)
        for sock in (client, conn, listener):
            sock.close()
