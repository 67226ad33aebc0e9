"""Who is asking, and what they may do. The one place access is decided.

Every request passes `check_request` (a before_request hook): cross-site writes are
refused, `identify()` names the caller, and the policy below says what that caller may do.
There is no login page: identity comes from the tailnet, or from a bearer token.

Identity modes (COMMONPLACE_AUTH):
  serve  Behind `tailscale serve` (the default deployment). The web binds 127.0.0.1 and
         serve sets Tailscale-User-Login / -Name on each request it proxies, after deleting
         any the client sent. We believe them only on a loopback connection (nothing else
         went through serve) and never on a Funnel request (the public internet).
  whois  Bound to the tailnet address directly. We ask tailscaled's LocalAPI who is at the
         connection's remote address, over its unix socket; briefly cached; if tailscaled
         does not answer, nobody gets in.
  dev    A loopback connection that did not come through a proxy is the owner. Loudly
         logged; for one laptop. Never the Docker image's default.
Bearer tokens (named, hashed, revocable) work in every mode: for the CLI, scripts, tagged
nodes (which have no user identity) and runners. A `feed` token may also ride in the URL
of /feed.atom, because feed readers cannot send headers.

Policy: owners (COMMONPLACE_OWNERS) do everything; viewers (COMMONPLACE_VIEWERS) read;
runner tokens call the runner API (/api/v1/runner/...) and nothing else; feed tokens read
the feed and nothing else. Anyone else gets 403 with who they were seen as.
"""

from __future__ import annotations

import datetime as dt
import email.errors
import email.header
import hashlib
import hmac
import http.client
import ipaddress
import json
import logging
import secrets
import socket
import threading
import time
from dataclasses import dataclass
from urllib.parse import quote, urlsplit

import sqlalchemy as sa
from flask import Flask, current_app, g, request
from werkzeug.exceptions import SecurityError
from werkzeug.middleware.proxy_fix import ProxyFix
from werkzeug.routing import IntegerConverter

from app.config import AUTH_MODES
from app.models import Token, utcnow

log = logging.getLogger(__name__)

READ_ROLES = {"owner", "viewer"}
SAFE_METHODS = {"GET", "HEAD", "OPTIONS"}
PUBLIC_ENDPOINTS = {"static", "notes.healthz"}
FEED_ENDPOINT = "notes.feed"
RUNNER_BLUEPRINT = "runner"  # /api/v1/runner/...: the pull API of the runner agents
LOCALAPI_HOST = "local-tailscaled.sock"  # apitype.LocalAPIHost: the Host tailscaled expects
TAGGED_DEVICES = "tagged-devices"  # UserProfile.LoginName of every tagged node
WHOIS_TIMEOUT = 2.0
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


class Denied(Exception):
    def __init__(self, status: int, message: str, seen_as: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.seen_as = seen_as


class WhoisUnavailable(Exception):
    """tailscaled could not be asked, or gave an answer we cannot read."""


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


def _came_through_proxy() -> bool:
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


def _clean_name(value: str) -> str:
    return "".join(ch for ch in value if ch.isprintable())[:200].strip()


# -- tailscaled's LocalAPI whois -----------------------------------------------------------


@dataclass(frozen=True)
class Peer:
    """What tailscaled says about the other end of a connection."""

    login: str  # UserProfile.LoginName, lower-cased
    name: str  # UserProfile.DisplayName
    node: str  # the device's MagicDNS name
    tags: tuple[str, ...]  # Node.Tags: a tagged node acts as its tags, not as a person

    @property
    def tagged(self) -> bool:
        return bool(self.tags) or self.login == TAGGED_DEVICES


def parse_whois(doc: object) -> Peer:
    """Read an apitype.WhoIsResponse ({"Node": {...}, "UserProfile": {...}, "CapMap": ...})."""
    if not isinstance(doc, dict):
        raise WhoisUnavailable("whois answer is not a JSON object")
    node, profile = doc.get("Node"), doc.get("UserProfile")
    # "In successful whois responses, Node and UserProfile are never nil" (apitype.go).
    if not isinstance(node, dict) or not isinstance(profile, dict):
        raise WhoisUnavailable("whois answer lacks Node or UserProfile")
    login, tags = profile.get("LoginName"), node.get("Tags") or []
    if not isinstance(login, str) or not isinstance(tags, list):
        raise WhoisUnavailable("whois answer has no LoginName")
    node_name = node.get("ComputedName") or str(node.get("Name") or "").rstrip(".")
    display = _clean_name(str(profile.get("DisplayName") or ""))
    return Peer(login=login.strip().lower(), name=display, node=_clean_name(str(node_name)),
                tags=tuple(str(t) for t in tags))


class _UnixHTTPConnection(http.client.HTTPConnection):
    """HTTP over tailscaled's unix socket. The host name is what tailscaled expects in the
    Host header; the socket path is where we actually connect."""

    def __init__(self, socket_path: str, timeout: float):
        super().__init__(LOCALAPI_HOST, timeout=timeout)
        self.socket_path = socket_path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.socket_path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


def localapi_whois(socket_path: str, addr: str, timeout: float = WHOIS_TIMEOUT) -> Peer | None:
    """Ask tailscaled who is at `addr` (ip:port or ip): GET /localapi/v0/whois?addr=...
    None means "not a tailnet peer" (tailscaled's 404 "no match for IP:port"); anything else
    that is not a readable 200 raises WhoisUnavailable, and the caller lets nobody in."""
    conn = _UnixHTTPConnection(socket_path, timeout)
    try:
        conn.request("GET", "/localapi/v0/whois?addr=" + quote(addr, safe=""))
        response = conn.getresponse()
        body = response.read(1 << 20)
    except (OSError, http.client.HTTPException) as exc:
        raise WhoisUnavailable(f"tailscaled ({socket_path}) did not answer: {exc}") from exc
    finally:
        conn.close()
    if response.status == 404:
        return None
    if response.status != 200:
        text = body[:200].decode("utf-8", "replace").strip()
        raise WhoisUnavailable(f"tailscaled answered {response.status}: {text}")
    try:
        return parse_whois(json.loads(body))
    except ValueError as exc:
        raise WhoisUnavailable(f"unreadable whois answer: {exc}") from exc


# golink's seam: the one function that asks tailscaled, a module variable so tests (or a
# platform whose LocalAPI is not a unix socket) can put another in its place.
whois = localapi_whois


class WhoisCache:
    """Recent answers by peer IP (one IP is one tailnet node), for a few seconds: a page
    load is a dozen requests, and each would otherwise ask tailscaled again. Only positive
    answers are kept; a refusal or an unanswered question is asked again next time."""

    def __init__(self, max_entries: int = 512):
        self.max_entries = max_entries
        self._lock = threading.Lock()
        self._items: dict[tuple[str, str], tuple[float, Peer]] = {}

    def lookup(self, socket_path: str, ip: str, addr: str, ttl: float) -> Peer | None:
        key, now = (socket_path, ip), time.monotonic()
        with self._lock:
            hit = self._items.get(key)
            if hit and hit[0] > now:
                return hit[1]
        peer = whois(socket_path, addr)
        if peer is not None and ttl > 0:
            with self._lock:
                if len(self._items) >= self.max_entries:
                    self._items = {k: v for k, v in self._items.items() if v[0] > now}
                    while len(self._items) >= self.max_entries:
                        self._items.pop(next(iter(self._items)))
                self._items[key] = (now + ttl, peer)
        return peer

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


whois_cache = WhoisCache()


# -- identity ------------------------------------------------------------------------------


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
    name = _clean_name(decode_header_value(request.headers.get("Tailscale-User-Name", "")))
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
        peer = whois_cache.lookup(config["TAILSCALE_SOCKET"], ip, addr,
                                  float(config["WHOIS_CACHE_SECONDS"]))
    except WhoisUnavailable as exc:
        # Fail closed: without tailscaled's word nobody is anybody.
        log.error("whois for %s failed: %s", addr, exc)
        raise Denied(403, "could not ask tailscaled who you are, so nobody is let in; "
                          "the owner should check that tailscaled is running",
                     seen_as=f"unknown ({ip})") from None
    if peer is None:
        raise Denied(403, f"{ip} is not a device on this tailnet",
                     seen_as=f"nobody ({ip} is not on the tailnet)")
    if peer.tagged:
        tags = ", ".join(peer.tags) or TAGGED_DEVICES
        raise Denied(403, f"{peer.node} is a tagged device ({tags}); tagged devices have no "
                          "user identity: give it a bearer token", seen_as=f"{peer.node} ({tags})")
    return _member_identity(peer.login, peer.name, "whois")


def _bearer(header: str) -> str | None:
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
        secret = _bearer(header)
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
    if mode == "dev" and is_loopback(peer) and not _came_through_proxy():
        return Identity("owner@localhost", "owner", "dev")
    return None


# -- the access check ----------------------------------------------------------------------


def _cross_site() -> bool:
    """True for a browser request made from another site (CSRF). Tailnet identity is
    ambient, like a cookie: any page the owner visits could otherwise post to the notebook.
    Go 1.25's CrossOriginProtection and datasette's csrf.py decide the same way."""
    header = request.headers.get("Authorization", "")
    if _bearer(header) is not None and "Cookie" not in request.headers:
        return False  # a browser never sends a bearer token on its own
    site = request.headers.get("Sec-Fetch-Site")
    if site is not None:
        return site not in ("same-origin", "none")
    origin = request.headers.get("Origin")
    if origin is None:
        return False  # not a browser (curl, the CLI): nothing ambient to abuse
    parts = urlsplit(origin.strip().lower())
    return parts.netloc != request.host.lower() or parts.scheme != request.scheme


def _policy(identity: Identity) -> None:
    """What an identity may do here. Raises Denied."""
    seen_as = identity.login
    if request.blueprint == RUNNER_BLUEPRINT:
        if identity.role in ("runner", "owner"):
            return
        raise Denied(403, f"{identity.login} ({identity.role}) cannot use the runner API",
                     seen_as=seen_as)
    if identity.role == "runner":
        raise Denied(403, "runner tokens may call only /api/v1/runner/", seen_as=seen_as)
    if identity.role == "feed":
        if request.endpoint == FEED_ENDPOINT and request.method in SAFE_METHODS:
            return
        raise Denied(403, "feed tokens open /feed.atom and nothing else", seen_as=seen_as)
    if not identity.can_read:
        raise Denied(403, f"{identity.login} ({identity.role}) cannot read here",
                     seen_as=seen_as)
    if request.method not in SAFE_METHODS and not identity.can_write:
        raise Denied(403, f"{identity.login} has read-only access", seen_as=seen_as)


def check_request() -> None:
    """Decide access for the current request; raises Denied. Sets g.identity."""
    g.identity = None
    if request.endpoint in PUBLIC_ENDPOINTS or request.endpoint is None:
        return  # health checks, stylesheets, and 404/405 (nothing there to protect)
    if request.method not in SAFE_METHODS and _cross_site():
        raise Denied(403, "cross-site request refused")
    identity = identify()
    if identity is None:
        raise Denied(401 if request.headers.get("Authorization") else 403,
                     "not signed in: open the notebook through your tailnet",
                     seen_as=f"nobody (a connection from {peer_address() or 'unknown'})")
    g.identity = identity
    _policy(identity)


# -- what the server may be bound to -------------------------------------------------------


def bind_problem(bind: str, mode: str, allow_non_loopback: bool) -> str | None:
    """Why the web must not listen on `bind`, or None. Loopback is the default because
    then `tailscale serve` is the only way in from the network."""
    if bind.startswith("unix:"):
        return None
    host = bind.rsplit(":", 1)[0] if ":" in bind else bind
    host = host.strip("[]")
    if host == "localhost" or is_loopback(host):
        return None
    if mode == "dev":
        return (f"refusing to listen on {bind} in dev mode: dev mode makes a loopback "
                "connection the owner and is meant for one laptop. Set COMMONPLACE_OWNERS "
                "and COMMONPLACE_AUTH=serve or whois to put the notebook on a network.")
    if not allow_non_loopback:
        return (f"refusing to listen on {bind or 'every address'}: that is not a loopback "
                "address, so every device that can reach it could connect directly instead "
                "of through `tailscale serve`. Keep COMMONPLACE_BIND=127.0.0.1:8000 and run "
                "`tailscale serve --bg 8000`; or, to bind the tailnet address itself "
                "(COMMONPLACE_AUTH=whois), pass --allow-non-loopback.")
    return None


# -- response headers ----------------------------------------------------------------------

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'"
)
# For files users or runs put on our origin (attachments, run artifacts): opened on its
# own, an SVG could run script as the notebook; sandboxed with no script source it is an
# inert document.
INERT_CSP = "default-src 'none'; img-src 'self'; style-src 'unsafe-inline'; sandbox"
HSTS = "max-age=31536000"


def security_headers(response):
    response.headers.setdefault("Content-Security-Policy", CSP)
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["X-Frame-Options"] = "DENY"
    response.headers["Referrer-Policy"] = "same-origin"
    response.headers["Cross-Origin-Opener-Policy"] = "same-origin"
    response.headers["Cross-Origin-Resource-Policy"] = "same-origin"
    response.headers["Permissions-Policy"] = "geolocation=(), microphone=(), payment=(), usb=()"
    if request.is_secure:
        # Only over HTTPS (serve's X-Forwarded-Proto): on plain http://127.0.0.1 the header
        # is meaningless, and on a name it would pin HTTPS for a year.
        response.headers["Strict-Transport-Security"] = HSTS
    return response


class BoundedInt(IntegerConverter):
    """<int:...> up to SQLite's INTEGER range: a path id of 2**64 is no route (404), not an
    OverflowError deep inside a query (500). Hostile input stops at the door."""

    def __init__(self, map, fixed_digits=0, min=None, max=2**63 - 1, signed=False):  # noqa: A002
        super().__init__(map, fixed_digits=fixed_digits, min=min, max=max, signed=signed)


def untrusted_host(exc: SecurityError):
    """Flask refuses a Host not in TRUSTED_HOSTS before routing. Answer without templates
    (they build URLs from that very host), and say what to change if the name is ours."""
    host = request.environ.get("HTTP_HOST", "")
    log.warning("refused a request for host %r: not in COMMONPLACE_HOSTS", host)
    message = (f"this notebook does not answer to the name {host!r}; if it should, add the "
               "name to COMMONPLACE_HOSTS")
    if request.path.startswith("/api/"):
        return {"error": {"code": "untrusted_host", "message": message}}, 400
    return message + "\n", 400, {"Content-Type": "text/plain; charset=utf-8"}


def init_app(app: Flask) -> None:
    mode = app.config["AUTH_MODE"]
    if mode not in AUTH_MODES:
        raise ValueError(f"AUTH_MODE must be one of {AUTH_MODES}, not {mode!r}")
    if mode == "serve":
        # `tailscale serve` is exactly one proxy and Sets X-Forwarded-For and -Proto (its
        # serve.go), so trust one hop of each. It passes Host through unchanged, so
        # X-Forwarded-Host is not trusted: believing it would let any local client name a
        # trusted host and walk past TRUSTED_HOSTS.
        app.wsgi_app = ProxyFix(app.wsgi_app, x_for=1, x_proto=1, x_host=0, x_port=0,
                                x_prefix=0)
    if mode == "dev":
        log.warning(
            "COMMONPLACE_AUTH=dev: every loopback connection is the owner. Set "
            "COMMONPLACE_OWNERS (and serve through `tailscale serve`) for anything but a laptop."
        )
    elif not app.config["OWNERS"]:
        log.warning("COMMONPLACE_AUTH=%s but COMMONPLACE_OWNERS is empty: no tailnet login "
                    "can write (bearer tokens still work)", mode)
    app.url_map.converters["int"] = BoundedInt  # before the blueprints add their routes
    app.register_error_handler(SecurityError, untrusted_host)
    app.before_request(check_request)
    app.after_request(security_headers)
