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
import ipaddress
import logging
import secrets
from dataclasses import dataclass

import sqlalchemy as sa
from flask import current_app, request

from app.errors import Denied
from app.models import Token, utcnow
from app.web.auth import tailscaled
from app.web.auth.tailscaled import clean_name

log = logging.getLogger(__name__)

READ_ROLES = {"owner", "viewer"}
FEED_ENDPOINT = "notes.feed"
# A token's last-used time is for the owner's eyes ("is this token still in use?"), not an
# audit log: touching it at most once a minute keeps reads from taking the write lock.
LAST_USED_RESOLUTION = dt.timedelta(seconds=60)
# Headers that only a proxy adds. In dev mode their presence means the loopback peer is a
# proxy (such as `tailscale serve`) speaking for someone else, who is not the owner.
PROXY_HEADERS = ("X-Forwarded-For", "Forwarded", "Tailscale-User-Login",
                 "Tailscale-Funnel-Request", "Tailscale-Headers-Info")


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


# -- where a request comes from ------------------------------------------------------------


def is_loopback(addr: str | None) -> bool:
    try:
        return ipaddress.ip_address((addr or "").strip("[]")).is_loopback
    except ValueError:
        return False


def peer_address() -> str:
    """The TCP peer, as the server saw it. ProxyFix rewrites REMOTE_ADDR from
    X-Forwarded-For in serve mode; the original is what tells us serve was the peer."""
    original = request.environ.get("werkzeug.proxy_fix.orig", {})
    return original.get("REMOTE_ADDR") or request.environ.get("REMOTE_ADDR") or ""


def came_through_proxy() -> bool:
    return any(name in request.headers for name in PROXY_HEADERS)


def decode_header_value(value: str) -> str:
    """Tailscale sends values that are not ASCII as RFC 2047 encoded words
    (=?utf-8?q?J=C3=B6rg?=); decode them, keep anything else as it came."""
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
    with current_app.extensions["db"].read() as session:
        row = session.scalar(sa.select(Token).where(Token.token_hash == hash_token(secret),
                                                    Token.revoked_at.is_(None)))
        if row is None or (roles is not None and row.role not in roles):
            return None
        identity = Identity(f"token:{row.name}", row.role, "token")
        stale = row.last_used_at is None or utcnow() - row.last_used_at > LAST_USED_RESOLUTION
        token_id = row.id
    if stale:
        _touch(token_id)
    return identity


def _member_identity(login: str, name: str, via: str) -> Identity:
    """A tailnet person: owner, viewer, or refused. A login we cannot confirm to be an
    owner is not one; every member of a shared tailnet reaches the port, so being on the
    tailnet is not enough."""
    config = current_app.config
    if login in {o.lower() for o in config["OWNERS"]}:
        return Identity(login, "owner", via, name)
    if login in {v.lower() for v in config["VIEWERS"]}:
        return Identity(login, "viewer", via, name)
    shown = f"{name} ({login})" if name and name.lower() != login else login
    raise Denied(403, f"{login} is not allowed to use this notebook", seen_as=shown)


def _serve_identity(peer: str) -> Identity:
    if not is_loopback(peer):
        # Headers from a non-loopback peer could have been typed by anyone who can reach
        # the port: serve deletes clients' copies, but this request did not come through it.
        raise Denied(403, "identity headers are believed only from tailscale serve on "
                          "this machine", seen_as=f"nobody (a direct connection from {peer})")
    if request.headers.get("Tailscale-Funnel-Request"):
        raise Denied(403, "requests through Funnel (the public internet) are never let in",
                     seen_as="the public internet (Tailscale Funnel)")
    login = decode_header_value(request.headers.get("Tailscale-User-Login", "")).strip().lower()
    if not login:
        # serve sets no identity for tagged devices and for this machine's own clients.
        raise Denied(403, "this request carries no tailnet identity: open the notebook at "
                          "its tailnet name, or use a bearer token (tagged devices, scripts)",
                     seen_as="nobody (no Tailscale identity)")
    name = clean_name(decode_header_value(request.headers.get("Tailscale-User-Name", "")))
    return _member_identity(login, name, "serve")


def _remote_ip_port() -> tuple[str, str]:
    ip = request.environ.get("REMOTE_ADDR") or ""
    port = request.environ.get("REMOTE_PORT") or ""
    host = f"[{ip}]" if ":" in ip else ip
    return ip, f"{host}:{port}" if port else ip


def _whois_identity() -> Identity:
    ip, addr = _remote_ip_port()
    if is_loopback(ip):
        raise Denied(403, "a connection from this machine has no tailnet identity: use a "
                          "bearer token", seen_as=f"nobody (local connection {ip})")
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
    if peer.tagged:
        tags = ", ".join(peer.tags) or tailscaled.TAGGED_DEVICES
        raise Denied(403, f"{peer.node} is a tagged device ({tags}); tagged devices have no "
                          "user identity: give it a bearer token", seen_as=f"{peer.node} ({tags})")
    return _member_identity(peer.login, peer.name, "whois")


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
    header = request.headers.get("Authorization")
    if header is not None:
        secret = bearer(header)
        if secret is None:
            raise Denied(401, "only Authorization: Bearer tokens are accepted")
        identity = _token_identity(secret)
        if identity is None:
            raise Denied(401, "unknown or revoked token")
        return identity
    feed_token = request.args.get("token")
    if feed_token and request.endpoint == FEED_ENDPOINT:
        # Feed readers cannot send headers; a feed token rides in the URL, for the feed
        # only (a URL ends up in logs and histories, so no other role is accepted here).
        identity = _feed_identity(feed_token)
        if identity is None:
            raise Denied(403, "unknown or revoked feed token", seen_as="a feed reader")
        return identity
    mode, peer = current_app.config["AUTH_MODE"], peer_address()
    if mode == "serve":
        return _serve_identity(peer)
    if mode == "whois":
        return _whois_identity()
    if mode == "dev" and is_loopback(peer) and not came_through_proxy():
        return Identity("owner@localhost", "owner", "dev")
    return None
