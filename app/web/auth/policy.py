"""What an identity may do here, and the hook that decides it for every request:
cross-site writes are refused, `identify()` names the caller, and the policy says what
that caller may do. Owners do everything; viewers read; runner tokens call the runner API
and nothing else; feed tokens read the feed and nothing else.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from flask import Request, g, request

from app.errors import Denied
from app.web.auth.identity import FEED_ENDPOINTS, Identity, bearer, identify
from app.web.auth.listeners import peer_address

SAFE_METHODS = {"GET", "HEAD", "OPTIONS"}
PUBLIC_ENDPOINTS = {"static", "notes.healthz"}
RUNNER_BLUEPRINT = "runner"  # /api/v1/runner/...: the pull API of the runner agents


def _cross_site() -> bool:
    """True for a browser request made from another site (CSRF). Tailnet identity is
    ambient, like a cookie: any page the owner visits could otherwise post to the notebook.
    Go 1.25's CrossOriginProtection and datasette's csrf.py decide the same way."""
    header = request.headers.get("Authorization", "")
    if bearer(header) is not None and "Cookie" not in request.headers:
        return False  # a browser never sends a bearer token on its own
    site = request.headers.get("Sec-Fetch-Site")
    if site is not None:
        return site not in ("same-origin", "none")
    origin = request.headers.get("Origin")
    if origin is None:
        return False  # not a browser (curl, the CLI): nothing ambient to abuse
    parts = urlsplit(origin.strip().lower())
    return parts.netloc != request.host.lower() or parts.scheme != request.scheme


def _policy(identity: Identity, req: Request) -> None:
    """What an identity may do here. Raises Denied."""
    seen_as = identity.login
    if req.blueprint == RUNNER_BLUEPRINT:
        if identity.role in ("runner", "owner"):
            return
        raise Denied(403, f"{identity.login} ({identity.role}) cannot use the runner API",
                     seen_as=seen_as)
    if identity.role == "runner":
        raise Denied(403, "runner tokens may call only /api/v1/runner/", seen_as=seen_as)
    if identity.role == "feed":
        if req.endpoint in FEED_ENDPOINTS and req.method in SAFE_METHODS:
            return
        raise Denied(403, "feed tokens open /feed.atom (and its card images) and nothing else",
                     seen_as=seen_as)
    if not identity.can_read:
        raise Denied(403, f"{identity.login} ({identity.role}) cannot read here",
                     seen_as=seen_as)
    if req.method not in SAFE_METHODS and not identity.can_write:
        raise Denied(403, f"{identity.login} has read-only access", seen_as=seen_as)


def check_request() -> None:
    """Decide access for the current request; raises Denied. Sets g.identity. (The request
    is looked up once: each look through Flask's proxy costs three calls, and this runs
    before every page.)"""
    req, ctx = request._get_current_object(), g._get_current_object()
    ctx.identity = None
    if req.endpoint in PUBLIC_ENDPOINTS or req.endpoint is None:
        return  # health checks, stylesheets, and 404/405 (nothing there to protect)
    if req.method not in SAFE_METHODS and _cross_site():
        raise Denied(403, "cross-site request refused")
    identity = identify()
    if identity is None:
        raise Denied(401 if req.headers.get("Authorization") else 403,
                     "not signed in: open the notebook through your tailnet",
                     seen_as=f"nobody (a connection from {peer_address() or 'unknown'})")
    ctx.identity = identity
    # For the access log (gunicorn.conf.py): who we took the caller for, not what a header
    # claimed.
    req.environ["commonplace.user"] = identity.login
    _policy(identity, req)
