"""HTTP defences that are not about who is asking: response headers (a strict CSP with
no inline script, nosniff, frame denial, HSTS over HTTPS), ids bounded to SQLite's range,
a clean 400 for an untrusted Host, and which addresses the web may listen on.
docs/SECURITY.md is the threat model.
"""

from __future__ import annotations

import logging

from flask import Flask, request
from werkzeug.exceptions import SecurityError
from werkzeug.routing import IntegerConverter

from app.web.auth.identity import is_loopback

log = logging.getLogger(__name__)


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
    app.url_map.converters["int"] = BoundedInt  # before the blueprints add their routes
    app.register_error_handler(SecurityError, untrusted_host)
    app.after_request(security_headers)
