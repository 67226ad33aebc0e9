"""Who is asking: a bearer token, a feed token, or a tailnet person (named by
`tailscale serve`'s headers, by tailscaled's whois, or by dev mode's loopback). The
modes and why each is believed are described in app/web/auth/__init__.py.

`identify()` names the caller or refuses one it can name but not admit; what an identity
may do is app/web/auth/policy.py.
"""

from __future__ import annotations

import datetime as dt
import email.errors
import email.header
import hashlib
import hmac
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass

import sqlalchemy as sa
from flask import current_app, request

from app.config import ascii_lower
from app.db import WRITE_METHODS, Prepared, get_reader
from app.errors import Denied
from app.models import Token, utcnow
from app.web.auth import tailscaled
from app.web.auth.listeners import (
    by_serve_socket,
    came_through_proxy,
    is_loopback,
    local_address,
    peer_address,
    same_ip,
)
from app.web.auth.serve_headers import login_from_header, serve_header_value
from app.web.auth.tailscaled import clean_name

log = logging.getLogger(__name__)

READ_ROLES = {"owner", "viewer"}
# What a feed token opens: the feed, and the run card images it shows (a feed reader fetches
# them as it fetched the feed, the token in the URL; app/web/pages/cards.py).
FEED_ENDPOINTS = frozenset({"notes.feed", "experiments.card_image"})
# A token's last-used time is for the owner's eyes ("is this token still in use?"), not an
# audit log: touching it at most once a minute keeps reads from taking the write lock.
LAST_USED_RESOLUTION = dt.timedelta(seconds=60)
IDENTITY_HEADERS = ("Tailscale-User-Login", "Tailscale-User-Name", "Tailscale-Funnel-Request")


@dataclass(frozen=True)
class Identity:
    login: str
    role: str  # owner | viewer | runner | feed
    via: str  # serve | whois | dev | token
    name: str = ""  # display name, when the tailnet gave one

    @property
    def can_write(self) -> bool:
        return self.role == "owner"

    @property
    def can_read(self) -> bool:
        return self.role in READ_ROLES


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    return "cp_" + secrets.token_urlsafe(32)


def decode_header_value(value: str) -> str:
    """Tailscale sends values that are not ASCII as RFC 2047 encoded words
    (=?utf-8?q?J=C3=B6rg?=); decode them for display, keep anything else as it came.
    Never for an access decision (serve_headers.py says why)."""
    if "=?" not in value:
        return value
    try:
        parts = email.header.decode_header(value)
        return "".join(part.decode(charset or "ascii", errors="replace")
                       if isinstance(part, bytes) else part for part, charset in parts)
    except (LookupError, ValueError, email.errors.HeaderParseError):
        return value


# -- who is asking -----------------------------------------------------------------------


def _touch(token_id: int) -> None:
    with current_app.extensions["db"].write() as session:
        session.execute(sa.update(Token).where(Token.id == token_id).values(last_used_at=utcnow()))


def _token_identity(secret: str, roles: set[str] | None = None) -> Identity | None:
    """The identity of an active token, or None. Only its hash is stored."""
    if not secret or len(secret) > 200:
        return None
    # A prepared Core row, not an ORM object: every API call and runner heartbeat passes
    # here, and through the ORM this lookup was most of a small API request. A read looks
    # it up in the request's own transaction (get_reader: the snapshot an entry's view then
    # reads, no connection of its own to open); a write on a connection of its own, as its
    # session would take the write lock here, which _touch then waits for.
    # (docs/PERFORMANCE.md, *Profiles*)
    if request.method in WRITE_METHODS:
        with current_app.extensions["db"].engine.connect() as conn:
            found = ACTIVE_TOKEN.run(conn, {"hash": hash_token(secret)})
    else:
        found = ACTIVE_TOKEN.run(get_reader(), {"hash": hash_token(secret)})
    row = found[0] if found else None
    if row is None or (roles is not None and row.role not in roles):
        return None
    if row.last_used_at is None or utcnow() - row.last_used_at > LAST_USED_RESOLUTION:
        _touch(row.id)
    return Identity(f"token:{row.name}", row.role, "token")


ACTIVE_TOKEN = Prepared(sa.select(Token.id, Token.name, Token.role, Token.last_used_at).where(
    Token.token_hash == sa.bindparam("hash"), Token.revoked_at.is_(None)))


def _member_identity(key: str, as_sent: Callable[[str], str], shown: str, name: str,
                     via: str) -> Identity:
    """A tailnet person: owner, viewer, or refused. `key` is the login as it reached us,
    A-Z lower-cased; `as_sent` turns a configured login into the form it would reach us
    in (serve's header encoding, or as it is from whois). A login we cannot confirm to be
    an owner is not one; every member of a shared tailnet reaches the port, so being on
    the tailnet is not enough."""
    config = current_app.config
    for role, logins in (("owner", config["OWNERS"]), ("viewer", config["VIEWERS"])):
        for login in logins:
            if ascii_lower(as_sent(login)) == key:
                return Identity(login, role, via, name)
    seen = f"{name} ({shown})" if name and ascii_lower(name) != ascii_lower(shown) else shown
    raise Denied(403, f"{shown} is not allowed to use this notebook", seen_as=seen)


NO_IDENTITY = ("this request carries no tailnet identity: open the notebook at its tailnet "
               "name, or use a bearer token (tagged devices, scripts, runners)")


def _serve_identity(peer: str) -> Identity:
    if not by_serve_socket():
        # The TCP door: runners, scripts, this machine's other processes and any raw TCP
        # forward reach it, and any of them can type serve's headers. serve itself comes
        # by its socket (listeners.py).
        if any(name in request.headers for name in IDENTITY_HEADERS):
            raise Denied(403, "identity headers are believed only on the socket tailscale "
                              "serve proxies to (COMMONPLACE_SERVE_SOCKET): point serve at "
                              "unix:<that path>, or use a bearer token",
                         seen_as=f"nobody (a direct connection from {peer or 'a socket'})")
        raise Denied(403, NO_IDENTITY, seen_as=f"nobody (a direct connection from {peer})")
    if request.headers.get("Tailscale-Funnel-Request"):
        raise Denied(403, "requests through Funnel (the public internet) are never let in",
                     seen_as="the public internet (Tailscale Funnel)")
    raw = request.headers.get("Tailscale-User-Login", "")
    if not raw.strip():
        # serve sets no identity for tagged devices and for this machine's own clients.
        raise Denied(403, NO_IDENTITY, seen_as="nobody (no Tailscale identity)")
    key, shown = login_from_header(raw)
    name = clean_name(decode_header_value(request.headers.get("Tailscale-User-Name", "")))
    return _member_identity(key, serve_header_value, shown, name, "serve")


def _remote_ip_port() -> tuple[str, str]:
    ip = request.environ.get("REMOTE_ADDR") or ""
    port = request.environ.get("REMOTE_PORT") or ""
    host = f"[{ip}]" if ":" in ip else ip
    return ip, f"{host}:{port}" if port else ip


THIS_NODE = ("a connection from this node itself has no tailnet identity: use a bearer "
             "token. (A proxy here, such as tailscale serve or Funnel pointed at the tailnet "
             "address, makes every client look like this node; in whois mode the web must "
             "be reached directly.)")


def _whois_identity() -> Identity:
    ip, addr = _remote_ip_port()
    here = local_address()
    if is_loopback(ip) or same_ip(ip, here):
        # This machine, from loopback or from its own tailnet address: whois of our own
        # address answers with this node's user, who is not the person at the keyboard of
        # whatever process (or forward) opened the connection.
        raise Denied(403, THIS_NODE, seen_as=f"nobody (local connection {ip})")
    if came_through_proxy():
        # The peer is a proxy (serve or Funnel pointed at the tailnet address, a reverse
        # proxy): whois would name the proxy's node, not the person behind it.
        raise Denied(403, "in whois mode the web is reached directly over the tailnet; this "
                          "request came through a proxy (X-Forwarded-*, Forwarded or "
                          "Tailscale-* headers), which speaks for someone whois cannot name",
                     seen_as=f"nobody (a proxy at {ip})")
    config = current_app.config
    try:
        peer = tailscaled.whois_cache.lookup(config["TAILSCALE_SOCKET"], ip, addr,
                                  float(config["WHOIS_CACHE_SECONDS"]))
    except tailscaled.WhoisUnavailable as exc:
        # Fail closed: without tailscaled's word nobody is anybody.
        log.error("whois for %s failed: %s", addr, exc)
        raise Denied(403, "could not ask tailscaled who you are, so nobody is let in; "
                          "the owner should check that tailscaled is running",
                     seen_as=f"unknown ({ip})") from None
    if peer is None:
        raise Denied(403, f"{ip} is not a device on this tailnet",
                     seen_as=f"nobody ({ip} is not on the tailnet)")
    if here is not None and any(same_ip(a, here) for a in peer.addresses):
        # whois answered with this node (another of its addresses): not a person either.
        raise Denied(403, THIS_NODE, seen_as=f"nobody (this node, {peer.node})")
    if peer.tagged:
        tags = ", ".join(peer.tags) or tailscaled.TAGGED_DEVICES
        raise Denied(403, f"{peer.node} is a tagged device ({tags}); tagged devices have no "
                          "user identity: give it a bearer token", seen_as=f"{peer.node} ({tags})")
    return _member_identity(peer.login, str, peer.login, peer.name, "whois")


def bearer(header: str) -> str | None:
    scheme, _, credentials = header.partition(" ")
    if scheme.lower() != "bearer":
        return None
    return credentials.strip()


def _feed_identity(secret: str) -> Identity | None:
    configured = current_app.config.get("FEED_TOKEN") or ""
    if configured and hmac.compare_digest(secret.encode(), configured.encode()):
        return Identity("feed-token", "feed", "token")
    return _token_identity(secret, roles={"feed"})


def identify() -> Identity | None:
    """The identity of the current request. Raises Denied for a caller we can name but
    refuse (an unknown login, a tagged node, a bad token); None for one we cannot name."""
    req = request._get_current_object()  # once: each look through the proxy is 3 calls
    environ = req.environ
    header = environ.get("HTTP_AUTHORIZATION")  # as request.headers would read it
    if header is not None:
        secret = bearer(header)
        if secret is None:
            raise Denied(401, "only Authorization: Bearer tokens are accepted")
        identity = _token_identity(secret)
        if identity is None:
            raise Denied(401, "unknown or revoked token")
        return identity
    # `in` first: MultiDict.get raises and catches an exception for a missing key, and
    # this runs on every request.
    feed_token = req.args["token"] if "token" in req.args else None
    if feed_token and req.endpoint in FEED_ENDPOINTS:
        # Feed readers cannot send headers; a feed token rides in the URL, for the feed
        # and its images only (a URL ends up in logs and histories, so no other role is
        # accepted here).
        identity = _feed_identity(feed_token)
        if identity is None:
            raise Denied(403, "unknown or revoked feed token", seen_as="a feed reader")
        return identity
    mode, peer = current_app.config["AUTH_MODE"], peer_address(environ)
    if mode == "serve":
        return _serve_identity(peer)
    if mode == "whois":
        return _whois_identity()
    if mode == "dev" and is_loopback(peer) and not came_through_proxy(environ):
        return Identity("owner@localhost", "owner", "dev")
    return None
