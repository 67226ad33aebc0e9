"""Access: who is let in, as whom, to do what; and what every response carries.

Through the test client (where REMOTE_ADDR can be a tailnet address) and through the real
web (`commonplace web`, gunicorn on a free loopback port), including a network namespace of
the test's own in which the web sees a genuinely non-loopback peer.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import subprocess
import sys

import pytest
import sqlalchemy as sa
from conftest import ROOT
from tailnet import NETNS_ADDR, NetnsWebServer, WebServer, fetch, netns_available, notebook_state

from app.config import from_environment, trusted_hosts
from app.models import Entry, Token
from app.web import hardening
from app.web.auth import identity

OWNER, VIEWER = "owner@example.com", "viewer@example.com"
AS_OWNER = {"Tailscale-User-Login": OWNER}
AS_VIEWER = {"Tailscale-User-Login": VIEWER}
TAILNET_PEER = {"REMOTE_ADDR": "100.64.0.7", "REMOTE_PORT": "51234"}


@pytest.fixture
def served(make_app):
    """Serve mode with one owner and one viewer, as `tailscale serve` deployments run."""
    return make_app(AUTH_MODE="serve", OWNERS=[OWNER], VIEWERS=[VIEWER])


def add_token(app, name: str, role: str) -> str:
    secret = identity.new_token()
    with app.extensions["db"].write() as session:
        session.add(Token(name=name, role=role, token_hash=identity.hash_token(secret)))
    return secret


def bearer(secret: str) -> dict:
    return {"Authorization": f"Bearer {secret}"}


def entry_count(app) -> int:
    with app.extensions["db"].read() as session:
        return session.scalar(sa.select(sa.func.count()).select_from(Entry))


# -- serve mode: identity headers ------------------------------------------------------


def test_identity_headers_from_loopback_make_an_owner(served):
    client = served.test_client()
    r = client.post("/api/v1/entries", json={"title": "mine"}, headers=AS_OWNER)
    assert r.status_code == 201
    assert client.get("/", headers=AS_OWNER).text.count(f"Signed in as {OWNER}") == 1
    # logins compare case-insensitively, as email addresses do
    r = client.get("/api/v1/entries", headers={"Tailscale-User-Login": OWNER.upper()})
    assert r.status_code == 200


@pytest.mark.parametrize("peer", ["100.64.0.7", "fd7a:115c:a1e0::9", "192.168.1.20", "10.0.0.5"])
def test_identity_headers_from_a_non_loopback_peer_are_ignored(served, peer):
    client = served.test_client()
    r = client.post("/api/v1/entries", json={"title": "spoofed"}, headers=AS_OWNER,
                    environ_base={"REMOTE_ADDR": peer})
    assert r.status_code == 403
    assert peer in r.get_json()["error"]["seen_as"]
    assert entry_count(served) == 0


def test_x_forwarded_for_cannot_make_a_peer_loopback(served):
    """ProxyFix rewrites remote_addr from X-Forwarded-For; the decision uses the TCP peer."""
    r = served.test_client().get("/api/v1/entries", headers={**AS_OWNER,
                                 "X-Forwarded-For": "127.0.0.1"}, environ_base=TAILNET_PEER)
    assert r.status_code == 403


@pytest.mark.parametrize("login", [OWNER, VIEWER, ""])
def test_funnel_requests_are_refused_whoever_they_claim_to_be(served, login):
    headers = {"Tailscale-Funnel-Request": "?1"}
    if login:
        headers["Tailscale-User-Login"] = login
    r = served.test_client().get("/", headers=headers)
    assert r.status_code == 403
    assert "public internet" in r.text and "You were seen as" in r.text


def test_unknown_login_is_403_and_told_who_it_was_seen_as(served):
    client = served.test_client()
    headers = {"Tailscale-User-Login": "eve@example.com",
               "Tailscale-User-Name": "=?utf-8?q?=C3=88ve_M=C3=BCller?="}
    r = client.get("/api/v1/entries", headers=headers)
    assert r.status_code == 403
    assert r.get_json()["error"]["seen_as"] == "Ève Müller (eve@example.com)"
    page = client.get("/", headers=headers)
    assert page.status_code == 403 and "You were seen as" in page.text
    assert "Ève Müller (eve@example.com)" in page.text


def test_no_identity_at_all_is_403(served):
    r = served.test_client().get("/api/v1/entries")
    assert r.status_code == 403 and "no tailnet identity" in r.get_json()["error"]["message"]


@pytest.mark.parametrize("raw, decoded", [
    ("=?utf-8?q?J=C3=B6rg_Schr=C3=B6der?=", "Jörg Schröder"),
    ("=?UTF-8?B?5bGx55Sw5aSq6YOO?=", "山田太郎"),
    ("Plain Name", "Plain Name"),
    ("=?utf-8?q?broken", "=?utf-8?q?broken"),
    ("=?x-unknown?q?abc?=", "=?x-unknown?q?abc?="),
])
def test_rfc2047_names_are_decoded(raw, decoded):
    assert identity.decode_header_value(raw) == decoded


# -- viewers, owners, tokens -----------------------------------------------------------

VIEWER_WRITES = [
    ("post", "/api/v1/entries", {"json": {"title": "x"}}),
    ("put", "/api/v1/entries/{id}", {"json": {"body": "x", "base_revision": 1}}),
    ("delete", "/api/v1/entries/{id}", {}),
    ("post", "/api/v1/entries/{id}/restore", {"json": {"revision": 1, "base_revision": 1}}),
    ("put", "/api/v1/letter-template", {"json": {"template": "## Mine"}}),
    ("post", "/entries/new", {"data": {"title": "x", "date": "2024-03-27"}}),
    ("post", "/entries/{id}/edit", {"data": {"title": "x", "base_revision": "1"}}),
    ("post", "/entries/{id}/delete", {"data": {"base_revision": "1"}}),
    ("post", "/entries/{id}/restore", {"data": {"revision": "1", "base_revision": "1"}}),
    ("post", "/settings/template", {"data": {"template": "## Mine"}}),
    ("post", "/weeks/2024-W13/letter", {}),
]


@pytest.mark.parametrize("method, path, kwargs", VIEWER_WRITES,
                         ids=[f"{m} {p}" for m, p, _ in VIEWER_WRITES])
def test_viewers_read_but_cannot_write(served, data_dir, method, path, kwargs):
    client = served.test_client()
    entry = client.post("/api/v1/entries", json={"title": "Shared"}, headers=AS_OWNER)
    entry_id = entry.get_json()["id"]
    assert client.get(f"/api/v1/entries/{entry_id}", headers=AS_VIEWER).status_code == 200
    before = notebook_state(served.extensions["db"], data_dir)
    r = getattr(client, method)(path.format(id=entry_id), headers=AS_VIEWER, **kwargs)
    assert r.status_code == 403
    assert notebook_state(served.extensions["db"], data_dir) == before


def test_tokens_through_the_cli_hashed_named_revocable(make_app, data_dir, monkeypatch):
    """`commonplace token create/list/revoke` against the same database the app uses."""
    from app.cli import main

    app = make_app(AUTH_MODE="serve", OWNERS=[OWNER])
    monkeypatch.setenv("COMMONPLACE_DATA_DIR", str(data_dir))
    monkeypatch.delenv("COMMONPLACE_DATABASE_URL", raising=False)
    monkeypatch.setenv("COMMONPLACE_TIMEZONE", "UTC")
    cli = app.test_cli_runner()
    created = cli.invoke(main, ["token", "create", "laptop-cli", "--role", "owner"])
    assert created.exit_code == 0, created.output
    secret = created.output.strip().splitlines()[-1]
    assert secret.startswith("cp_") and len(secret) > 40

    with app.extensions["db"].read() as session:
        row = session.scalar(sa.select(Token).where(Token.name == "laptop-cli"))
        assert row.token_hash == hashlib.sha256(secret.encode()).hexdigest()
        assert row.last_used_at is None
    assert secret.encode() not in (data_dir / "commonplace.db").read_bytes()

    client = app.test_client()
    r = client.post("/api/v1/entries", json={"title": "by token"}, headers=bearer(secret),
                    environ_base=TAILNET_PEER)  # a token works from any peer
    assert r.status_code == 201 and r.get_json()["id"]
    listed = cli.invoke(main, ["token", "list"]).output
    assert "laptop-cli\towner\tactive\tlast used 2" in listed  # a date, not "never"

    assert cli.invoke(main, ["token", "revoke", "laptop-cli"]).exit_code == 0
    r = client.get("/api/v1/entries", headers=bearer(secret), environ_base=TAILNET_PEER)
    assert r.status_code == 401
    assert "revoked" in cli.invoke(main, ["token", "list"]).output


@pytest.mark.parametrize("header", ["Bearer ", "Bearer nope", "Basic b3duZXI6cHc=", "Token x",
                                    "bearer " + "x" * 500])
def test_bad_authorization_is_401_and_changes_nothing(served, header):
    r = served.test_client().post("/api/v1/entries", json={"title": "x"},
                                  headers={**AS_OWNER, "Authorization": header})
    assert r.status_code == 401 and entry_count(served) == 0


def test_viewer_token_reads_only(served):
    secret = add_token(served, "reader", "viewer")
    client = served.test_client()
    assert client.get("/api/v1/entries", headers=bearer(secret)).status_code == 200
    r = client.post("/api/v1/entries", json={"title": "x"}, headers=bearer(secret))
    assert r.status_code == 403 and entry_count(served) == 0


@pytest.fixture
def with_runner_route(served):
    """A route in the runner blueprint's namespace (endpoint "runner.*"), whatever views
    that blueprint has today; request.blueprint is what the policy reads."""
    served.add_url_rule("/api/v1/runner/__probe", endpoint="runner.auth_probe",
                        view_func=lambda: {"ok": True}, methods=["GET", "POST"])
    return served


@pytest.mark.parametrize("role, runner_api, elsewhere", [
    ("runner", 200, 403), ("owner", 200, 200), ("viewer", 403, 200), ("feed", 403, 403),
])
def test_token_roles_and_the_runner_api(with_runner_route, role, runner_api, elsewhere):
    secret = add_token(with_runner_route, f"t-{role}", role)
    client = with_runner_route.test_client()
    headers = bearer(secret)
    assert client.post("/api/v1/runner/__probe", headers=headers).status_code == runner_api
    assert client.get("/api/v1/entries", headers=headers).status_code == elsewhere
    assert client.get("/", headers=headers).status_code == elsewhere


def test_tailnet_viewer_cannot_use_the_runner_api(with_runner_route):
    client = with_runner_route.test_client()
    assert client.get("/api/v1/runner/__probe", headers=AS_VIEWER).status_code == 403
    assert client.get("/api/v1/runner/__probe", headers=AS_OWNER).status_code == 200


def test_feed_tokens_open_the_feed_only(make_app):
    app = make_app(AUTH_MODE="serve", OWNERS=[OWNER], FEED_TOKEN="static-feed-secret")
    feed_secret, owner_secret = add_token(app, "reader", "feed"), add_token(app, "cli", "owner")
    client = app.test_client()
    peer = {"environ_base": TAILNET_PEER}
    assert client.get(f"/feed.atom?token={feed_secret}", **peer).status_code == 200
    assert client.get("/feed.atom?token=static-feed-secret", **peer).status_code == 200
    assert client.get("/feed.atom", headers=bearer(feed_secret), **peer).status_code == 200
    # an owner token is a header-only credential: never accepted from a URL
    assert client.get(f"/feed.atom?token={owner_secret}", **peer).status_code == 403
    assert client.get(f"/api/v1/entries?token={feed_secret}", **peer).status_code == 403
    assert client.get(f"/?token={feed_secret}", **peer).status_code == 403
    assert client.get("/feed.atom?token=wrong", **peer).status_code == 403


# -- dev mode ----------------------------------------------------------------------------


def test_dev_mode_owner_is_loopback_without_a_proxy(client, app, data_dir):
    assert client.post("/api/v1/entries", json={"title": "local"}).status_code == 201
    before = notebook_state(app.extensions["db"], data_dir)
    # Through a proxy (tailscale serve in front of a dev-mode web) nobody is the owner.
    for headers in ({"X-Forwarded-For": "100.64.0.7"}, AS_OWNER,
                    {"Tailscale-Funnel-Request": "?1"}, {"Forwarded": "for=100.64.0.7"}):
        r = client.post("/api/v1/entries", json={"title": "x"}, headers=headers)
        assert r.status_code == 403, headers
    r = client.post("/api/v1/entries", json={"title": "x"}, environ_base=TAILNET_PEER)
    assert r.status_code == 403
    assert notebook_state(app.extensions["db"], data_dir) == before


# -- cross-site writes ------------------------------------------------------------------

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
    secret = add_token(app, "cli", "owner")
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
    client = served.test_client()
    before = notebook_state(served.extensions["db"], data_dir)
    for extra in ({"Sec-Fetch-Site": "cross-site"}, {"Origin": "https://evil.example"}):
        r = getattr(client, method)(path, headers={**AS_OWNER, **extra}, **kwargs)
        assert r.status_code == 403
    assert notebook_state(served.extensions["db"], data_dir) == before


def test_origin_must_match_the_scheme_serve_reports(served):
    client = served.test_client()
    https = {**AS_OWNER, "X-Forwarded-Proto": "https", "Host": "localhost"}
    r = client.post("/api/v1/entries", json={"title": "ok"},
                    headers={**https, "Origin": "https://localhost"})
    assert r.status_code == 201
    r = client.post("/api/v1/entries", json={"title": "no"},
                    headers={**https, "Origin": "http://localhost"})
    assert r.status_code == 403


# -- hosts, headers, sizes ---------------------------------------------------------------


@pytest.mark.parametrize("host", ["evil.example", "127.0.0.1.nip.io", "notes.tail9999.ts.net",
                                  "localhost.evil.example:8000"])
def test_untrusted_host_is_refused(served, host):
    client = served.test_client()
    r = client.post("/api/v1/entries", json={"title": "rebound"},
                    headers={**AS_OWNER, "Host": host})
    assert r.status_code == 400 and entry_count(served) == 0
    # X-Forwarded-Host is not believed, so it cannot name a trusted host instead
    r = client.get("/api/v1/entries", headers={**AS_OWNER, "Host": host,
                                                "X-Forwarded-Host": "localhost"})
    assert r.status_code == 400


def test_tailnet_names_from_config_are_trusted(make_app, monkeypatch):
    monkeypatch.setenv("COMMONPLACE_HOSTS", "Notes.tail1234.ts.net, notes")
    hosts = from_environment()["TRUSTED_HOSTS"]
    assert hosts == trusted_hosts(["notes.tail1234.ts.net", "notes"])
    app = make_app(AUTH_MODE="serve", OWNERS=[OWNER], TRUSTED_HOSTS=hosts)
    client = app.test_client()
    for host in ("notes.tail1234.ts.net", "notes", "localhost:8000", "127.0.0.1:8000"):
        assert client.get("/api/v1/entries", headers={**AS_OWNER, "Host": host}).status_code \
            == 200, host
    assert client.get("/api/v1/entries", headers={**AS_OWNER, "Host": "other.tail1234.ts.net"}
                      ).status_code == 400


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
    client = served.test_client()
    created = client.post("/api/v1/entries", json={"title": "h"}, headers=AS_OWNER)
    paths = _get_paths(served, created.get_json()["id"])
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


def test_hsts_only_over_https(served):
    client = served.test_client()
    r = client.get("/", headers={**AS_OWNER, "X-Forwarded-Proto": "https"})
    assert r.headers["Strict-Transport-Security"] == "max-age=31536000"
    assert "Strict-Transport-Security" not in client.get("/", headers=AS_OWNER).headers


def test_oversized_bodies_are_413_and_change_nothing(served, data_dir):
    client = served.test_client()
    before = notebook_state(served.extensions["db"], data_dir)
    big = b"x" * (served.config["MAX_CONTENT_LENGTH"] + 1)
    for path, ctype in (("/api/v1/entries", "application/json"),
                        ("/entries/new", "application/x-www-form-urlencoded"),
                        ("/settings/template", "multipart/form-data; boundary=x")):
        r = client.post(path, data=big, content_type=ctype, headers=AS_OWNER)
        assert r.status_code == 413, path
    assert notebook_state(served.extensions["db"], data_dir) == before


# -- what the web may listen on ------------------------------------------------------------


@pytest.mark.parametrize("bind, mode, allow, refused", [
    ("127.0.0.1:8000", "serve", False, False), ("localhost:8000", "dev", False, False),
    ("[::1]:8000", "serve", False, False), ("unix:/run/commonplace.sock", "serve", False, False),
    ("0.0.0.0:8000", "serve", False, True), (":8000", "serve", False, True),
    ("100.64.0.1:8000", "whois", False, True), ("100.64.0.1:8000", "whois", True, False),
    ("0.0.0.0:8000", "dev", True, True), ("notes.example:8000", "serve", False, True),
])
def test_bind_policy(bind, mode, allow, refused):
    assert (hardening.bind_problem(bind, mode, allow) is not None) == refused


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


# -- through the real web ------------------------------------------------------------------


@pytest.fixture
def serve_web(data_dir):
    server = WebServer(data_dir, COMMONPLACE_AUTH="serve", COMMONPLACE_OWNERS=OWNER,
                       COMMONPLACE_VIEWERS=VIEWER, COMMONPLACE_HOSTS="notes.tail1234.ts.net")
    try:
        yield server
    finally:
        server.close()


def post_json(server, path, data, headers):
    return fetch(server.base + path, method="POST", body=json.dumps(data).encode(),
                 headers={"Content-Type": "application/json", **headers})


def test_real_server_serve_mode(serve_web):
    """`commonplace web` under gunicorn, as `tailscale serve` would call it."""
    base = serve_web.base
    serve = {**AS_OWNER, "X-Forwarded-For": "100.101.102.103", "X-Forwarded-Proto": "https",
             "Host": "notes.tail1234.ts.net", "Tailscale-User-Name": "=?utf-8?q?Ow=C3=B1er?="}
    status, headers, body = post_json(serve_web, "/api/v1/entries", {"title": "via serve"}, serve)
    assert status == 201
    assert headers["Strict-Transport-Security"] == "max-age=31536000"
    status, headers, body = fetch(base + "/", headers=serve)
    assert status == 200 and f"Signed in as {OWNER}".encode() in body
    assert "script-src 'self'" in headers["Content-Security-Policy"]
    assert headers["X-Frame-Options"] == "DENY"

    assert post_json(serve_web, "/api/v1/entries", {"title": "v"}, AS_VIEWER)[0] == 403
    assert fetch(base + "/", headers={**serve, "Tailscale-Funnel-Request": "?1"})[0] == 403
    status, _, body = fetch(base + "/api/v1/entries",
                            headers={"Tailscale-User-Login": "eve@example.com"})
    assert status == 403 and json.loads(body)["error"]["seen_as"] == "eve@example.com"
    status, _, _ = post_json(serve_web, "/api/v1/entries", {"title": "csrf"},
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
