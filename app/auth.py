"""Who is asking, and what they may do. The one place access is decided.

Modes (COMMONPLACE_AUTH):
  serve  Behind `tailscale serve`: the app binds 127.0.0.1 and serve sets
         Tailscale-User-Login on each proxied request. We trust that header only on a
         loopback connection, and never on a Funnel request (the public internet).
  dev    Loopback is the owner, no headers needed. Loudly logged; for one laptop only.
Bearer tokens (CLI, scripts, feed readers) work in every mode.

The Tailscale issue completes this module (whois mode, viewers over tokens, hardening);
its shape (identify → Identity, require) stays.
"""

from __future__ import annotations

import hashlib
import ipaddress
import logging
import secrets
from dataclasses import dataclass
from urllib.parse import urlsplit

import sqlalchemy as sa
from flask import Flask, current_app, g, request

from app.models import Token, utcnow

log = logging.getLogger(__name__)
READ_ROLES = {"owner", "viewer"}
SAFE_METHODS = {"GET", "HEAD", "OPTIONS"}


@dataclass(frozen=True)
class Identity:
    login: str
    role: str  # owner | viewer | feed | runner
    via: str  # serve | dev | token

    @property
    def can_write(self) -> bool:
        return self.role == "owner"

    @property
    def can_read(self) -> bool:
        return self.role in READ_ROLES


class Denied(Exception):
    def __init__(self, status: int, message: str, seen_as: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.seen_as = seen_as


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    return "cp_" + secrets.token_urlsafe(32)


def _is_loopback(addr: str | None) -> bool:
    try:
        return ipaddress.ip_address(addr or "").is_loopback
    except ValueError:
        return False


def _token_identity(token: str) -> Identity | None:
    from app.db import get_db

    with get_db().session(write=True) as session, session.begin():
        row = session.scalar(
            sa.select(Token).where(Token.token_hash == hash_token(token),
                                   Token.revoked_at.is_(None))
        )
        if row is None:
            return None
        row.last_used_at = utcnow()
        return Identity(f"token:{row.name}", row.role, "token")


def identify() -> Identity | None:
    """The identity of the current request, or None if it has none we accept."""
    config = current_app.config
    auth = request.headers.get("Authorization", "")
    if auth.startswith("Bearer "):
        return _token_identity(auth[7:].strip())
    feed_token = request.args.get("token")
    if feed_token and request.endpoint == "notes.feed":
        # Feed readers cannot send headers; the token rides in the URL, for the feed only.
        return _token_identity(feed_token)
    if not _is_loopback(request.remote_addr):
        # A user we cannot confirm to be an owner is not one: identity headers from a
        # non-loopback peer could have been typed by anyone who can reach the port.
        return None
    if request.headers.get("Tailscale-Funnel-Request"):
        return None  # the public internet, via Funnel: never an identity
    if config["AUTH_MODE"] == "serve":
        login = request.headers.get("Tailscale-User-Login", "").strip().lower()
        if not login:
            return None
        if login in config["OWNERS"]:
            return Identity(login, "owner", "serve")
        if login in config["VIEWERS"]:
            return Identity(login, "viewer", "serve")
        raise Denied(403, f"{login} is not allowed to use this notebook", seen_as=login)
    if config["AUTH_MODE"] == "dev":
        return Identity("owner@localhost", "owner", "dev")
    return None


def _cross_site() -> bool:
    """True for a browser request made from another site (CSRF). Identity here is ambient,
    like a cookie, so any page the owner visits could otherwise post to the notebook."""
    if request.headers.get("Authorization", "").startswith("Bearer ") and not request.cookies:
        return False  # a bearer token is never sent by a browser on its own
    site = request.headers.get("Sec-Fetch-Site")
    if site is not None:
        return site not in ("same-origin", "none")
    origin = request.headers.get("Origin")
    if origin is None:
        return False  # not a browser (curl, the CLI): nothing ambient to abuse
    parts = urlsplit(origin)
    return parts.netloc != request.host or parts.scheme != request.scheme


def check_request() -> None:
    """Decide access for the current request; raises Denied. Sets g.identity."""
    g.identity = None
    if request.endpoint in ("static", "notes.healthz") or request.endpoint is None:
        return
    if request.method not in SAFE_METHODS and _cross_site():
        raise Denied(403, "cross-site request refused")
    identity = identify()
    if identity is None:
        raise Denied(401 if request.headers.get("Authorization") else 403,
                     "not signed in: open the notebook through your tailnet")
    g.identity = identity
    if request.endpoint == "notes.feed" and identity.role == "feed":
        return
    if not identity.can_read:
        raise Denied(403, f"{identity.login} ({identity.role}) cannot read here",
                     seen_as=identity.login)
    if request.method not in SAFE_METHODS and not identity.can_write:
        raise Denied(403, f"{identity.login} has read-only access", seen_as=identity.login)


CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'"
)


def security_headers(response):
    response.headers.setdefault("Content-Security-Policy", CSP)
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["X-Frame-Options"] = "DENY"
    response.headers["Referrer-Policy"] = "same-origin"
    response.headers["Cross-Origin-Opener-Policy"] = "same-origin"
    return response


def init_app(app: Flask) -> None:
    if app.config["AUTH_MODE"] == "dev":
        log.warning(
            "COMMONPLACE_AUTH=dev: every loopback connection is the owner. Set "
            "COMMONPLACE_OWNERS (and serve through `tailscale serve`) for anything but a laptop."
        )
    app.before_request(check_request)
    app.after_request(security_headers)
