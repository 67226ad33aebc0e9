"""HTTP defences that are not about who is asking: response headers (a strict CSP with
no inline script, nosniff, frame denial, HSTS over HTTPS), ids bounded to SQLite's range,
a clean 400 for an untrusted Host, and how long a
request may hold one of the web's few threads (long polls here, bodies in bodies.py).
docs/SECURITY.md is the threat model.
"""

from __future__ import annotations

import logging

from flask import Flask, current_app, g, request
from werkzeug.exceptions import SecurityError
from werkzeug.routing import IntegerConverter

from app.web.bodies import (
    Slots,
    SlowBodies,
    busy,
    give_back_body_slot,
    take_body_slot,
)
from app.web.lingering import linger_in_a_thread

log = logging.getLogger(__name__)


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


# Every response's headers, unless the response set its own (an inert file's CSP, a card
# image's): the CSP first, since most responses set none.
FIXED_HEADERS = [
    ("Content-Security-Policy", CSP),
    ("X-Content-Type-Options", "nosniff"),
    ("X-Frame-Options", "DENY"),
    ("Referrer-Policy", "same-origin"),
    ("Cross-Origin-Opener-Policy", "same-origin"),
    ("Cross-Origin-Resource-Policy", "same-origin"),
    ("Permissions-Policy", "geolocation=(), microphone=(), payment=(), usb=()"),
]


class SecurityHeaders:
    """WSGI middleware around Flask's own app: the headers above on every response, errors
    and static files included. Added to the list start_response gets: an after_request
    hook setting them one by one on werkzeug's Headers scans the list on each set, nine
    times as long (docs/PERFORMANCE.md, *Profiles*)."""

    def __init__(self, wsgi_app):
        self.wsgi_app = wsgi_app

    def __call__(self, environ, start_response):
        def with_headers(status, headers, exc_info=None):
            own = {name.lower() for name, _ in headers}
            headers = [*headers, *(h for h in FIXED_HEADERS if h[0].lower() not in own)]
            if environ.get("wsgi.url_scheme") == "https":
                # Only over HTTPS (serve's X-Forwarded-Proto, which ProxyFix, outside this,
                # has applied): on plain http://127.0.0.1 the header is meaningless, and on
                # a name it would pin HTTPS for a year.
                headers.append(("Strict-Transport-Security", HSTS))
            return start_response(status, headers, exc_info)

        return self.wsgi_app(environ, with_headers)


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


# -- how long a request may hold a thread ----------------------------------------------------
#
# gunicorn's gthread worker lends a request one of its COMMONPLACE_WEB_THREADS threads for
# the whole request. Two kinds of request could keep every thread: long polls (the runner
# API's lease waits up to 30 s) and bodies sent slowly (app/web/bodies.py). A worker lends
# half its threads to long polls at most, and a few to bodies still arriving.

LONG_POLL_ENDPOINT = "runner.lease"
LongPolls = Slots


def take_long_poll() -> object:
    """before_request, after the access policy: only a caller let in holds a slot. Over
    the budget the answer is 429 at once, with when to ask again."""
    if request.endpoint != LONG_POLL_ENDPOINT or g.get("identity") is None:
        return None
    holder = g.identity.login
    if not current_app.extensions["long_polls"].take(holder):
        log.debug("long poll by %s refused: this worker holds as many as it lends", holder)
        return busy("too many long polls are waiting here (one per runner)")
    g.long_poll_holder = holder
    return None


def give_back_long_poll(_exc: BaseException | None) -> None:
    holder = g.pop("long_poll_holder", None)
    if holder is not None:
        current_app.extensions["long_polls"].give_back(holder)


# A search runs under a time limit (COMMONPLACE_SEARCH_TIME_LIMIT, app/notebook/
# search_budget.py), and one caller has at most two running in a worker at once: sixteen
# at once from one viewer kept every core busy.
SEARCH_ENDPOINTS = {"notes.search_page", "api.search_entries", "api.list_entries"}
SEARCHES_PER_CALLER = 2


def take_search_slot() -> object:
    if (request.endpoint not in SEARCH_ENDPOINTS or g.get("identity") is None
            or not request.args.get("q")):
        return None
    holder = g.identity.login
    if not current_app.extensions["searches"].take(holder):
        return busy(f"you have {SEARCHES_PER_CALLER} searches running here already")
    g.search_holder = holder
    return None


def give_back_search_slot(_exc: BaseException | None) -> None:
    holder = g.pop("search_holder", None)
    if holder is not None:
        current_app.extensions["searches"].give_back(holder)


def init_app(app: Flask) -> None:
    app.url_map.converters["int"] = BoundedInt  # before the blueprints add their routes
    app.register_error_handler(SecurityError, untrusted_host)
    app.wsgi_app = SlowBodies(SecurityHeaders(app.wsgi_app), grace=app.config["BODY_GRACE_S"])
    linger_in_a_thread()


def init_long_polls(app: Flask) -> None:
    """After the access policy's hook: only a caller already let in may hold a slot (a long
    poll, a body still arriving, a search)."""
    app.extensions["long_polls"] = Slots(app.config["LONG_POLLS_PER_WORKER"])
    app.extensions["arriving_bodies"] = Slots(app.config["ARRIVING_BODIES_PER_WORKER"],
                                              app.config["ARRIVING_BODIES_PER_CALLER"])
    waits = app.config["BODY_WAITS_PER_WORKER"]
    app.extensions["body_waits"] = Slots(waits, waits)
    app.extensions["searches"] = Slots(app.config["LONG_POLLS_PER_WORKER"],
                                       SEARCHES_PER_CALLER)
    app.before_request(take_long_poll)
    app.before_request(take_body_slot)
    app.before_request(take_search_slot)
    app.teardown_request(give_back_long_poll)
    app.teardown_request(give_back_body_slot)
    app.teardown_request(give_back_search_slot)
