"""whois mode: the web asks tailscaled's LocalAPI who is at the other end of a connection.

A stand-in LocalAPI on a temporary unix socket answers with the shape tailscaled really
returns (tests/data/tailscale_whois_*.json and their README for the source). The app's own
client code (app.web.auth.tailscaled.localapi_whois) talks to it: no mock of our code.
"""

from __future__ import annotations

import json

import pytest

from app.web.auth import tailscaled
from tests.helpers import OWNER as SERVED_OWNER
from tests.helpers import add_token, bearer
from tests.tailnet import (
    NETNS_ADDR,
    NETNS_PEER,
    FakeLocalAPI,
    NetnsWebServer,
    as_serve_sends,
    netns_available,
    notebook_state,
)
from tests.tailnet import whois_sample as sample

OWNER, VIEWER = "alice@example.com", "bob@example.com"
PHONE = {"REMOTE_ADDR": "100.101.102.103", "REMOTE_PORT": "52144"}


@pytest.fixture
def localapi():
    fake = FakeLocalAPI()
    tailscaled.whois_cache.clear()
    try:
        yield fake
    finally:
        fake.close()
        tailscaled.whois_cache.clear()


@pytest.fixture
def whois_app(make_app, localapi):
    return make_app(AUTH_MODE="whois", OWNERS=[OWNER], VIEWERS=[VIEWER],
                    TAILSCALE_SOCKET=localapi.path, WHOIS_CACHE_SECONDS=10)


def test_recorded_samples_parse():
    user = tailscaled.parse_whois(sample("user"))
    assert user == tailscaled.Peer(login="alice@example.com", name="Alice Müller",
                                   node="alices-iphone", tags=(),
                                   addresses=("100.101.102.103", "fd7a:115c:a1e0::6a01:6667"))
    assert not user.tagged
    tagged = tailscaled.parse_whois(sample("tagged"))
    assert tagged.tagged and tagged.tags == ("tag:gpu",) and tagged.login == "tagged-devices"


@pytest.mark.parametrize("doc", [None, [], "x", {}, {"Node": {}}, {"UserProfile": {}},
                                 {"Node": {}, "UserProfile": {"LoginName": 5}},
                                 {"Node": {"Tags": "tag:x"}, "UserProfile": {"LoginName": "a"}},
                                 {"Node": {"Addresses": "100.64.0.1/32"},
                                  "UserProfile": {"LoginName": "a"}}])
def test_malformed_answers_are_unavailable_not_identities(doc):
    with pytest.raises(tailscaled.WhoisUnavailable):
        tailscaled.parse_whois(doc)


def test_owner_device_is_the_owner(whois_app, localapi):
    localapi.peers["100.101.102.103"] = sample("user")
    client = whois_app.test_client()
    r = client.post("/api/v1/entries", json={"title": "from my phone"}, environ_base=PHONE)
    assert r.status_code == 201
    assert "Signed in as alice@example.com" in client.get("/", environ_base=PHONE).text
    # asked with the connection's ip:port, with the Host tailscaled expects
    assert localapi.requests[0] == "100.101.102.103:52144"
    assert set(localapi.hosts) == {"local-tailscaled.sock"}


def test_answers_are_cached_briefly(whois_app, localapi, make_app):
    localapi.peers["100.101.102.103"] = sample("user")
    client = whois_app.test_client()
    for _ in range(5):
        assert client.get("/api/v1/entries", environ_base=PHONE).status_code == 200
    assert len(localapi.requests) == 1
    # with caching off, each request asks
    uncached = make_app(AUTH_MODE="whois", OWNERS=[OWNER], TAILSCALE_SOCKET=localapi.path,
                        WHOIS_CACHE_SECONDS=0).test_client()
    tailscaled.whois_cache.clear()
    for _ in range(3):
        assert uncached.get("/api/v1/entries", environ_base=PHONE).status_code == 200
    assert len(localapi.requests) == 4


def test_viewer_device_reads_only(whois_app, localapi, data_dir):
    localapi.peers["100.101.102.103"] = sample("user", login=VIEWER, display="Bob")
    client = whois_app.test_client()
    assert client.get("/api/v1/entries", environ_base=PHONE).status_code == 200
    before = notebook_state(whois_app.extensions["db"], data_dir)
    r = client.post("/api/v1/entries", json={"title": "x"}, environ_base=PHONE)
    assert r.status_code == 403
    assert notebook_state(whois_app.extensions["db"], data_dir) == before


def test_other_tailnet_member_is_403_and_sees_who(whois_app, localapi):
    localapi.peers["100.101.102.103"] = sample("user", login="Eve@Example.com", display="Eve")
    r = whois_app.test_client().get("/api/v1/entries", environ_base=PHONE)
    assert r.status_code == 403
    assert r.get_json()["error"]["seen_as"] == "Eve (eve@example.com)"
    page = whois_app.test_client().get("/", environ_base=PHONE)
    assert page.status_code == 403 and "Eve (eve@example.com)" in page.text


def test_tagged_node_has_no_user_identity_but_a_token_works(whois_app, localapi):
    gpu = {"REMOTE_ADDR": "100.88.12.9", "REMOTE_PORT": "40000"}
    # even a tagged node whose creator is an owner acts as its tags, not as that person
    localapi.peers["100.88.12.9"] = sample("tagged")
    client = whois_app.test_client()
    r = client.get("/api/v1/entries", environ_base=gpu)
    assert r.status_code == 403
    error = r.get_json()["error"]
    assert "tagged device" in error["message"] and error["seen_as"] == "gpu-box (tag:gpu)"
    secret = add_token(whois_app.extensions["db"], "gpu-box", "owner")
    r = client.get("/api/v1/entries", environ_base=gpu, headers=bearer(secret))
    assert r.status_code == 200


def test_tags_alone_make_a_node_tagged(whois_app, localapi):
    """Node.Tags is authoritative even if a profile carried a person's login."""
    doc = sample("user")
    doc["Node"]["Tags"] = ["tag:server"]
    localapi.peers["100.101.102.103"] = doc
    assert whois_app.test_client().get("/", environ_base=PHONE).status_code == 403


def test_unknown_peer_is_403_and_not_cached(whois_app, localapi):
    client = whois_app.test_client()
    for _ in range(2):
        r = client.get("/api/v1/entries", environ_base={"REMOTE_ADDR": "192.168.1.50",
                                                        "REMOTE_PORT": "1234"})
        assert r.status_code == 403
        assert "not on the tailnet" in r.get_json()["error"]["seen_as"]
    assert localapi.requests == ["192.168.1.50:1234"] * 2


def test_ipv6_peer_address_is_bracketed(whois_app, localapi):
    localapi.peers["fd7a:115c:a1e0::6a01:6667"] = sample("user")
    r = whois_app.test_client().get("/api/v1/entries", environ_base={
        "REMOTE_ADDR": "fd7a:115c:a1e0::6a01:6667", "REMOTE_PORT": "443"})
    assert r.status_code == 200
    assert localapi.requests == ["[fd7a:115c:a1e0::6a01:6667]:443"]


def test_serve_headers_mean_nothing_in_whois_mode(whois_app, localapi):
    r = whois_app.test_client().get("/api/v1/entries", environ_base=PHONE,
                                    headers={"Tailscale-User-Login": OWNER})
    assert r.status_code == 403  # 100.101.102.103 is not a peer in the fake


def test_logins_fold_ascii_case_only(whois_app, localapi):
    """whois gives the login as it is (no encoding); its non-ASCII letters are not folded:
    the Kelvin sign is not a K."""
    localapi.peers["100.101.102.103"] = sample("user", login="\u212alice@Example.com")
    whois_app.config["OWNERS"] = ["kalice@example.com"]
    r = whois_app.test_client().get("/api/v1/entries", environ_base=PHONE)
    assert r.status_code == 403
    assert r.get_json()["error"]["seen_as"].endswith("(\u212alice@example.com)")
    tailscaled.whois_cache.clear()
    localapi.peers["100.101.102.103"] = sample("user", login="KAlice@Example.com")
    assert whois_app.test_client().get("/", environ_base=PHONE).status_code == 200


@pytest.mark.parametrize("headers", [
    as_serve_sends(funnel=True),  # Funnel, pointed at the tailnet address
    as_serve_sends(OWNER),  # serve, pointed at the tailnet address
    {"X-Forwarded-For": "100.101.102.103"}, {"Forwarded": "for=100.101.102.103"},
    {"Via": "1.1 proxy"}, {"X-Real-Ip": "100.101.102.103"},
    {"Tailscale-Funnel-Request": "?1"},
])
def test_proxied_requests_are_nobody_in_whois_mode(whois_app, localapi, data_dir, headers):
    """The peer of a proxied request is the proxy: whois would name the proxy's node (this
    node, through serve or Funnel) as if it were the person behind it."""
    localapi.peers["100.101.102.103"] = sample("user")  # whois would say: the owner
    before = notebook_state(whois_app.extensions["db"], data_dir)
    r = whois_app.test_client().post("/api/v1/entries", json={"title": "via a proxy"},
                                     headers=headers, environ_base=PHONE)
    assert r.status_code == 403 and "proxy" in r.get_json()["error"]["message"]
    assert notebook_state(whois_app.extensions["db"], data_dir) == before


def test_this_node_is_nobody_in_whois_mode(whois_app, localapi):
    """A connection from the node's own address (a forward or proxy on the node, which
    connects from the address it connects to) is refused without asking; whois of any of
    the node's addresses names the node's user, likely the owner."""
    self_ip = "100.101.102.103"
    localapi.peers[self_ip] = sample("user", ip=self_ip)
    client = whois_app.test_client()
    r = client.get("/api/v1/entries", environ_base=PHONE,
                   environ_overrides={"SERVER_NAME": self_ip})
    assert r.status_code == 403 and "this node itself" in r.get_json()["error"]["message"]
    assert localapi.requests == []
    # from another of the node's addresses (its IPv6 one): whois answers with this node
    six = "fd7a:115c:a1e0::6a01:6667"
    localapi.peers[six] = sample("user", ip=self_ip)
    r = client.get("/api/v1/entries", environ_base={"REMOTE_ADDR": six, "REMOTE_PORT": "1"},
                   environ_overrides={"SERVER_NAME": self_ip})
    assert r.status_code == 403 and "this node itself" in r.get_json()["error"]["message"]
    assert localapi.requests == [f"[{six}]:1"]


def test_loopback_is_nobody_without_asking(whois_app, localapi):
    r = whois_app.test_client().get("/api/v1/entries", headers={"Tailscale-User-Login": OWNER})
    assert r.status_code == 403 and "bearer token" in r.get_json()["error"]["message"]
    assert localapi.requests == []


@pytest.mark.parametrize("trouble", ["stopped", "missing", "denied", "garbage"])
def test_tailscaled_trouble_fails_closed(whois_app, localapi, data_dir, trouble):
    localapi.peers["100.101.102.103"] = sample("user")
    if trouble == "stopped":
        localapi.stop()  # the socket file is still there; nobody listens
    elif trouble == "missing":
        whois_app.config["TAILSCALE_SOCKET"] = localapi.path + ".gone"
    else:
        localapi.mode = trouble
    client = whois_app.test_client()
    before = notebook_state(whois_app.extensions["db"], data_dir)
    r = client.post("/api/v1/entries", json={"title": "x"}, environ_base=PHONE)
    assert r.status_code == 403
    assert "could not ask tailscaled" in r.get_json()["error"]["message"]
    assert notebook_state(whois_app.extensions["db"], data_dir) == before


def test_a_hung_tailscaled_fails_closed(whois_app, localapi, monkeypatch):
    monkeypatch.setattr(tailscaled, "WHOIS_TIMEOUT", 0.5)
    monkeypatch.setattr(tailscaled.localapi_whois, "__defaults__", (0.5,))
    localapi.mode = "hang"
    r = whois_app.test_client().get("/api/v1/entries", environ_base=PHONE)
    assert r.status_code == 403 and localapi.requests


def test_the_whois_function_is_swappable(whois_app, monkeypatch):
    """golink's seam: tests, or a platform whose LocalAPI is not a unix socket, replace
    app.web.auth.tailscaled.whois; the cache and the policy stay the same."""
    asked = []

    def fake_whois(socket_path, addr):
        asked.append(addr)
        return tailscaled.Peer(login=OWNER, name="Alice", node="laptop", tags=())

    monkeypatch.setattr(tailscaled, "whois", fake_whois)
    assert whois_app.test_client().get("/", environ_base=PHONE).status_code == 200
    assert asked == ["100.101.102.103:52144"]


# -- through the real web, from a non-loopback peer ----------------------------------------


@pytest.mark.skipif(not netns_available(),
                    reason="cannot make a network namespace here (unshare -n)")
def test_real_server_in_whois_mode(data_dir, localapi):
    """`commonplace web --allow-non-loopback` bound to 100.64.0.1 in a namespace of our
    own; requests come from 100.64.0.2, and the stand-in LocalAPI says who that is."""
    server = NetnsWebServer(data_dir, COMMONPLACE_AUTH="whois", COMMONPLACE_OWNERS=OWNER,
                            COMMONPLACE_TAILSCALE_SOCKET=localapi.path,
                            COMMONPLACE_WHOIS_CACHE_SECONDS="0", COMMONPLACE_HOSTS=NETNS_ADDR)
    try:
        json_headers = {"Content-Type": "application/json"}
        status, text = server.request("/api/v1/entries", method="POST", headers=json_headers,
                                      body=json.dumps({"title": "over the tailnet"}))
        assert status == 403 and "not on the tailnet" in text  # not a peer yet

        localapi.peers[NETNS_PEER] = sample("user", ip=NETNS_PEER)
        status, text = server.request("/api/v1/entries", method="POST", headers=json_headers,
                                      body=json.dumps({"title": "over the tailnet"}))
        assert status == 201, text
        assert localapi.requests[-1].startswith(f"{NETNS_PEER}:")  # ip:port of the peer

        # serve or Funnel pointed at the tailnet address: proxied, and from the node itself
        asked = len(localapi.requests)
        localapi.peers[NETNS_ADDR] = sample("user", ip=NETNS_ADDR)  # the node's own user
        for headers in (as_serve_sends(funnel=True, peer="203.0.113.9"), as_serve_sends(OWNER)):
            status, text = server.request("/api/v1/entries", method="POST",
                                          headers={**json_headers, **headers},
                                          body=json.dumps({"title": "via a proxy"}),
                                          source=NETNS_ADDR)
            assert status == 403 and "this node itself" in text, text
            # the same headers from another device: a proxy there, refused all the same
            status, text = server.request("/api/v1/entries", headers=headers)
            assert status == 403 and "proxy" in text, text
        # a raw TCP forward on the node (serve --tcp, ssh -L, socat) adds no headers
        status, text = server.request("/api/v1/entries", source=NETNS_ADDR)
        assert status == 403 and "this node itself" in text
        assert len(localapi.requests) == asked  # none of these was worth asking about

        localapi.peers[NETNS_PEER] = sample("tagged", ip=NETNS_PEER)
        status, text = server.request("/api/v1/entries")
        assert status == 403 and "tagged device" in text

        localapi.stop()
        status, text = server.request("/api/v1/entries")
        assert status == 403 and "could not ask tailscaled" in text
    finally:
        server.close()


@pytest.mark.parametrize("login", [OWNER + "\u00a0", OWNER + "\u3000", "\u2003" + OWNER,
                                   OWNER + "\n", " " + OWNER])
def test_a_login_with_any_space_around_it_is_not_the_owner(whois_app, localapi, login):
    """A login is compared as tailscaled gives it: no space of any kind is trimmed."""
    localapi.peers["100.101.102.103"] = sample("user", login=login)
    whois_app.config["OWNERS"] = [OWNER]
    assert whois_app.test_client().get("/", environ_base=PHONE).status_code == 403


@pytest.mark.parametrize("value", [f"=?utf-8?q?{SERVED_OWNER}=C2=A0?=",
                                   f"=?utf-8?q?{SERVED_OWNER}=E3=80=80?=",
                                   f"=?utf-8?q?=E2=80=83{SERVED_OWNER}?="])
def test_a_serve_login_with_a_unicode_space_is_not_the_owner(served, value):
    """serve sends a login with a non-ASCII space as an encoded word, decoded only to be
    shown: it is not the owner's login."""
    answer = served.client.get("/", headers={"Tailscale-User-Login": value})
    assert answer.status_code == 403
