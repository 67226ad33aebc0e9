"""Who is let in, and as whom: `tailscale serve`'s identity headers (believed on serve's
socket only, never through Funnel, compared as serve sends them), what viewers may not do,
and dev mode's loopback owner.

In-process, the test client stands for serve's socket when its peer is loopback (no
listener to look at). Which door a real connection came by is tested against gunicorn in
test_server.py. Tokens are in test_tokens.py, cross-site writes and response headers in
test_hardening.py, whois mode in test_whois.py.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.config import ascii_lower
from app.errors import Denied
from app.models import Entry
from app.web.auth import identity, serve_headers
from tests.helpers import AS_OWNER, AS_VIEWER, OWNER, ROOT, TAILNET_PEER, VIEWER, count
from tests.tailnet import notebook_state

# -- serve mode: identity headers ---------------------------------------------------------


def test_identity_headers_from_loopback_make_an_owner(served):
    client = served.client
    r = client.post("/api/v1/entries", json={"title": "mine"}, headers=AS_OWNER)
    assert r.status_code == 201
    assert client.get("/", headers=AS_OWNER).text.count(f"Signed in as {OWNER}") == 1
    # logins compare case-insensitively, as email addresses do
    r = client.get("/api/v1/entries", headers={"Tailscale-User-Login": OWNER.upper()})
    assert r.status_code == 200


@pytest.mark.parametrize("peer", ["100.64.0.7", "fd7a:115c:a1e0::9", "192.168.1.20", "10.0.0.5"])
def test_identity_headers_from_a_non_loopback_peer_are_ignored(served, peer):
    client = served.client
    r = client.post("/api/v1/entries", json={"title": "spoofed"}, headers=AS_OWNER,
                    environ_base={"REMOTE_ADDR": peer})
    assert r.status_code == 403
    assert peer in r.get_json()["error"]["seen_as"]
    assert count(served.db, Entry) == 0


def test_x_forwarded_for_cannot_make_a_peer_loopback(served):
    """ProxyFix rewrites remote_addr from X-Forwarded-For; the decision uses the TCP peer."""
    r = served.client.get("/api/v1/entries", headers={**AS_OWNER,
                                 "X-Forwarded-For": "127.0.0.1"}, environ_base=TAILNET_PEER)
    assert r.status_code == 403


@pytest.mark.parametrize("login", [OWNER, VIEWER, ""])
def test_funnel_requests_are_refused_whoever_they_claim_to_be(served, login):
    headers = {"Tailscale-Funnel-Request": "?1"}
    if login:
        headers["Tailscale-User-Login"] = login
    r = served.client.get("/", headers=headers)
    assert r.status_code == 403
    assert "public internet" in r.text and "You were seen as" in r.text


def test_unknown_login_is_403_and_told_who_it_was_seen_as(served):
    client = served.client
    headers = {"Tailscale-User-Login": "eve@example.com",
               "Tailscale-User-Name": "=?utf-8?q?=C3=88ve_M=C3=BCller?="}
    r = client.get("/api/v1/entries", headers=headers)
    assert r.status_code == 403
    assert r.get_json()["error"]["seen_as"] == "Ève Müller (eve@example.com)"
    page = client.get("/", headers=headers)
    assert page.status_code == 403 and "You were seen as" in page.text
    assert "Ève Müller (eve@example.com)" in page.text


def test_no_identity_at_all_is_403(served):
    r = served.client.get("/api/v1/entries")
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


# -- the login as serve sends it: compared raw, never decoded into someone else -------------
#
# serve sends an ASCII login unchanged and anything else as RFC 2047 Q encoded words
# (encTailscaleHeaderValue in ipn/ipnlocal/serve.go). The values below are the header bytes
# an attacker's own login makes serve send.


@pytest.fixture
def kate(make_app):
    app = make_app(AUTH_MODE="serve", OWNERS=["kate@x.test", "owner@x.test", "jörg@x.test"])
    return app.test_client(), app


@pytest.mark.parametrize("sent, seen_as", [
    # a tailnet user whose login is literally this ASCII string: serve passes it through
    ("=?utf-8?q?owner?=@x.test", "=?utf-8?q?owner?=@x.test"),
    ("=?UTF-8?B?b3duZXI=?=@x.test", "=?UTF-8?B?b3duZXI=?=@x.test"),
    # the Kelvin sign K (U+212A): "\u212aate".lower() == "kate"; Q-encoded as serve does
    ("=?utf-8?q?=E2=84=AAate@x.test?=", "\u212aate@x.test"),
    # the long s (U+017F): casefold() makes it "s"
    ("=?utf-8?q?=C5=BFam@x.test?=", "\u017fam@x.test"),
    # the same non-ASCII owner with its non-ASCII letter in another case: Ö is not ö
    ("=?utf-8?q?j=C3=96rg@x.test?=", "jÖrg@x.test"),
])
def test_a_login_is_never_decoded_or_folded_into_an_owner(kate, data_dir, sent, seen_as):
    client, app = kate
    before = notebook_state(app.extensions["db"], data_dir)
    r = client.post("/api/v1/entries", json={"title": "mine now"},
                    headers={"Tailscale-User-Login": sent})
    assert r.status_code == 403
    assert r.get_json()["error"]["seen_as"] == seen_as
    assert notebook_state(app.extensions["db"], data_dir) == before


@pytest.mark.parametrize("sent", [
    "=?utf-8?q?owner@x.test?=",  # encoded, but it is ASCII: serve never encodes that
    "=?utf-8?b?b3duZXJAeC50ZXN0?=",
    "=?utf-8?q?kate?= =?utf-8?q?@x.test?=",
    "=?utf-8?q?j=c3=b6rg@x.test?=",  # jörg, but in lower-case hex: not serve's bytes
    "=?UTF-8?Q?j=C3=B6rg@x.test?=",
    "owner@x.test\xa0",  # a byte serve never sends (str.strip() would have eaten it)
    "owner@x.test\x00",
    "owner @x.test",
])
def test_values_serve_never_sends_are_refused(kate, sent):
    client, _ = kate
    r = client.get("/api/v1/entries", headers={"Tailscale-User-Login": sent})
    assert r.status_code == 403
    assert r.get_json()["error"]["seen_as"].startswith("nobody")


@pytest.mark.parametrize("sent", [
    "=?utf-8?q?j=C3=B6rg@x.test?=",  # jörg@x.test, as serve encodes it
    "=?utf-8?q?J=C3=B6rg@X.TEST?=",  # its ASCII letters in another case: email-style
    "KATE@x.test", "kate@x.test",
])
def test_owners_are_matched_as_serve_sends_them(kate, sent):
    client, _ = kate
    r = client.get("/", headers={"Tailscale-User-Login": sent})
    assert r.status_code == 200


def test_an_owner_configured_with_an_encoded_looking_login_is_not_decoded(make_app):
    """A configured owner is compared in serve's form too: the literal login stays literal."""
    app = make_app(AUTH_MODE="serve", OWNERS=["=?utf-8?q?owner?=@x.test"])
    client = app.test_client()
    assert client.get("/", headers={"Tailscale-User-Login": "=?utf-8?q?owner?=@x.test"}
                      ).status_code == 200
    assert client.get("/", headers={"Tailscale-User-Login": "owner@x.test"}).status_code == 403


# Vectors from tailscale's TestEncTailscaleHeaderValue (ipn/ipnlocal/serve_test.go) and Go's
# mime TestEncodeWord / ExampleEncodeWord (src/mime/encodedword_test.go).
@pytest.mark.parametrize("value, sent", [
    ("", ""), ("Alice Smith", "Alice Smith"),
    ("Bad\udcffUTF-8", ""),  # not UTF-8 (a surrogate-escaped byte): serve sends nothing
    ("Krūmiņa", "=?utf-8?q?Kr=C5=ABmi=C5=86a?="),
    ("¡Hola, señor!", "=?utf-8?q?=C2=A1Hola,_se=C3=B1or!?="),
    ("François-Jérôme", "=?utf-8?q?Fran=C3=A7ois-J=C3=A9r=C3=B4me?="),
    ("\t !\"#$%&'()*+,-./ :;<>?@[\\]^_`{|}~", "\t !\"#$%&'()*+,-./ :;<>?@[\\]^_`{|}~"),
    # 63 characters of text per word at most, never splitting a character's bytes
    ("a" * 57 + "é", "=?utf-8?q?" + "a" * 57 + "=C3=A9?="),
    ("a" * 58 + "é", "=?utf-8?q?" + "a" * 58 + "?= =?utf-8?q?=C3=A9?="),
])
def test_serve_header_value_is_what_serve_sends(value, sent):
    assert serve_headers.serve_header_value(value) == sent


@given(st.text(min_size=1, max_size=80))
def test_what_serve_sends_reads_back_as_that_login_and_no_other(login):
    """Any login serve could send is read back as itself (or refused), and matches a
    configured login exactly when the two are equal but for A-Z case."""
    sent = serve_headers.serve_header_value(login)
    try:
        key, shown = serve_headers.login_from_header(sent)
    except Denied:
        return  # a value we refuse (controls, spaces, an encoded-looking ASCII login)
    assert key == serve_headers.login_key(login)
    for other in (login.lower(), login.casefold(), login.upper(), ascii_lower(login)):
        assert (serve_headers.login_key(other) == key) == (ascii_lower(other) ==
                                                           ascii_lower(login))


def test_serve_mode_trusts_the_header_from_loopback_only(served):
    client = served.client
    owner = AS_OWNER
    assert client.get("/api/v1/entries", headers=owner).status_code == 200
    assert client.post("/api/v1/entries", json={"title": "x"}, headers=owner).status_code == 201
    # the same header from a tailnet address (not through serve) is ignored
    r = client.get("/api/v1/entries", headers=owner, environ_base={"REMOTE_ADDR": "100.64.0.7"})
    assert r.status_code == 403
    # Funnel (public internet) is never an identity
    r = client.get("/api/v1/entries", headers={**owner, "Tailscale-Funnel-Request": "?1"})
    assert r.status_code == 403
    viewer = AS_VIEWER
    assert client.get("/api/v1/entries", headers=viewer).status_code == 200
    assert client.post("/api/v1/entries", json={"title": "x"}, headers=viewer).status_code == 403
    r = client.get("/api/v1/entries", headers={"Tailscale-User-Login": "eve@example.com"})
    assert r.status_code == 403 and r.get_json()["error"]["seen_as"] == "eve@example.com"
    assert client.get("/api/v1/entries").status_code == 403
    assert client.get("/healthz").status_code == 200


# -- viewers ------------------------------------------------------------------------------


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
    client = served.client
    entry = client.post("/api/v1/entries", json={"title": "Shared"}, headers=AS_OWNER)
    entry_id = entry.get_json()["id"]
    assert client.get(f"/api/v1/entries/{entry_id}", headers=AS_VIEWER).status_code == 200
    before = notebook_state(served.db, data_dir)
    r = getattr(client, method)(path.format(id=entry_id), headers=AS_VIEWER, **kwargs)
    assert r.status_code == 403
    assert notebook_state(served.db, data_dir) == before


# -- dev mode -----------------------------------------------------------------------------


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


DEV_WARNING = "COMMONPLACE_AUTH=dev: every loopback connection is the owner"


def test_dev_mode_is_announced_by_the_web_not_by_commands_that_serve_nothing(data_dir):
    env = {"PATH": "/usr/bin:/bin", "HOME": str(data_dir), "COMMONPLACE_DATA_DIR": str(data_dir),
           "COMMONPLACE_AUTH": "dev", "COMMONPLACE_TIMEZONE": "UTC"}

    def stderr(*argv: str) -> str:
        done = subprocess.run([sys.executable, *argv], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stderr

    assert DEV_WARNING not in stderr("-m", "app.cli", "export", str(data_dir.parent / "vault"))
    # what gunicorn's master calls to make the app it serves
    assert DEV_WARNING in stderr("-c", "import app; app.create_served_app()")
