"""HTTP defences that are not about who is asking: response headers (a strict CSP with
no inline script, nosniff, frame denial, HSTS over HTTPS), ids bounded to SQLite's range,
a clean 400 for an untrusted Host, which addresses the web may listen on, and how long a
request may hold one of the web's few threads (long polls, slow bodies).
docs/SECURITY.md is the threat model.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections import Counter

from flask import Flask, current_app, g, make_response, request
from werkzeug.exceptions import ClientDisconnected, RequestTimeout, SecurityError
from werkzeug.routing import IntegerConverter

from app.errors import error_response
from app.web.auth.listeners import is_loopback

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
                "`tailscale serve --bg unix:<COMMONPLACE_SERVE_SOCKET>`; or, to bind the "
                "tailnet address itself "
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
    and static files included. Added to the list start_response gets, which costs ~2 us
    where an after_request hook setting them one by one on werkzeug's Headers cost 18
    (each set scans the list; 2% of a page's time under gunicorn)."""

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
# the whole request, reading the body included, and reads what is left of an unread body
# before it reuses the connection. Two kinds of request could keep every thread: long
# polls (the runner API's lease waits up to 30 s) and bodies sent slowly. A worker lends
# half its threads to long polls at most, and a body must keep arriving.

LONG_POLL_ENDPOINT = "runner.lease"
RETRY_AFTER_S = 5
# A body may take BODY_GRACE_S to start, then must average BODY_MIN_RATE bytes a second
# (Apache mod_reqtimeout's body=…,MinRate=… rule): 64 kbit/s, slower than any phone link,
# so only a sender that means to hold the thread is cut off.
BODY_GRACE_S = 10.0
BODY_MIN_RATE = 8 * 1024
READ_PIECE = 64 * 1024
DRAIN_LIMIT = 64 * 1024  # an unread rest up to this is read, so the refusal arrives intact


class LongPolls:
    """The long polls one worker holds: at most `limit`, and one per caller (a runner has
    one lease request out at a time; twelve at once are a flood)."""

    def __init__(self, limit: int):
        self.limit = limit
        self._lock = threading.Lock()
        self._held: Counter[str] = Counter()

    def take(self, holder: str) -> bool:
        with self._lock:
            if self._held.total() >= self.limit or self._held[holder]:
                return False
            self._held[holder] += 1
            return True

    def give_back(self, holder: str) -> None:
        with self._lock:
            self._held[holder] -= 1
            if self._held[holder] <= 0:
                del self._held[holder]


def take_long_poll() -> object:
    """before_request, after the access policy: only a caller let in holds a slot. Over
    the budget the answer is 429 at once, with when to ask again."""
    if request.endpoint != LONG_POLL_ENDPOINT or g.get("identity") is None:
        return None
    holder = g.identity.login
    if not current_app.extensions["long_polls"].take(holder):
        log.debug("long poll by %s refused: this worker holds as many as it lends", holder)
        body, status = error_response(429, "busy", "too many long polls are waiting here "
                                      f"(one per runner); ask again in {RETRY_AFTER_S} s")
        response = make_response(body, status)
        response.headers["Retry-After"] = str(RETRY_AFTER_S)
        return response
    g.long_poll_holder = holder
    return None


def give_back_long_poll(_exc: BaseException | None) -> None:
    holder = g.pop("long_poll_holder", None)
    if holder is not None:
        current_app.extensions["long_polls"].give_back(holder)


def stop_reading(sock: socket.socket, how: int = socket.SHUT_RD) -> None:
    """Read nothing more from this connection: a recv blocked on it returns at once, and
    one made later finds the end of the stream instead of waiting for more."""
    try:
        sock.shutdown(how)
    except OSError:
        pass  # the client is gone already


class HangUpAfter:
    """A response after which the connection ends. gunicorn ignores an application's
    `Connection: close` (a hop-by-hop header) and would keep the connection, first reading
    whatever is left of the request body; so once the response is written (gunicorn then
    closes the iterable), both directions are shut and the rest of the body is never read."""

    def __init__(self, response, sock: socket.socket):
        self.response, self.sock = response, sock

    def __iter__(self):
        return iter(self.response)

    def close(self) -> None:
        try:
            if hasattr(self.response, "close"):
                self.response.close()
        finally:
            stop_reading(self.sock, socket.SHUT_RDWR)


class CountedBody:
    """wsgi.input, counted. A body that ends before its Content-Length (the client went
    away, or was cut off for being slow) raises instead of reading as a shorter body: a
    form cut in half must never save half a note."""

    def __init__(self, stream, length: int | None):
        self.stream, self.length = stream, length  # length None: chunked
        self.received = 0
        self.done = length == 0
        self.timed_out = False

    def _ended_early(self) -> Exception:
        if self.timed_out:
            return RequestTimeout(f"the request body arrived too slowly (under "
                                  f"{BODY_MIN_RATE // 1024} KiB/s after {BODY_GRACE_S:.0f} s)")
        return ClientDisconnected()

    def _piece(self, size: int) -> bytes:
        try:
            return self.stream.read(size)
        except OSError as exc:  # gunicorn's NoMoreData, a reset
            raise self._ended_early() from exc

    def read(self, size: int | None = -1) -> bytes:
        # In pieces, so that `received` (what the watcher measures) moves during one long
        # read: werkzeug reads a whole body with a single read().
        left = None if self.length is None else self.length - self.received
        if size is None or size < 0:
            want = left
        else:
            want = size if left is None else min(size, left)
        out = bytearray()
        while want is None or len(out) < want:
            piece = self._piece(READ_PIECE if want is None else min(want - len(out), READ_PIECE))
            if not piece:
                if self.length is not None:
                    raise self._ended_early()
                self.done = True  # the end of a chunked body
                break
            out += piece
            self.received += len(piece)
        if self.length is not None and self.received >= self.length:
            self.done = True
        return bytes(out)

    def readline(self, size: int | None = -1) -> bytes:
        try:
            data = self.stream.readline(size)
        except OSError as exc:
            raise self._ended_early() from exc
        self.received += len(data)
        if self.length is not None and self.received >= self.length:
            self.done = True
        elif not data and size != 0:
            if self.length is not None:
                raise self._ended_early()
            self.done = True
        return data

    def readlines(self, hint: int | None = -1) -> list[bytes]:
        return list(iter(self.readline, b""))

    def __iter__(self):
        return iter(self.readline, b"")


class SlowBodies:
    """WSGI middleware (under gunicorn): a body must keep arriving, and a body the app
    answered without reading (a refusal, a 413) is not read at all. A watcher thread cuts
    the connection's read side when a body falls behind (408); without it a POST with
    Content-Length: 1000000 sent a byte a second holds a thread for days."""

    def __init__(self, wsgi_app, grace: float = BODY_GRACE_S, min_rate: float = BODY_MIN_RATE,
                 tick: float = 0.25):
        self.wsgi_app, self.grace, self.min_rate, self.tick = wsgi_app, grace, min_rate, tick
        self._lock = threading.Lock()
        self._watched: dict[int, tuple[socket.socket, CountedBody, float]] = {}
        self._wake = threading.Event()
        self._watcher_pid: int | None = None

    def __call__(self, environ, start_response):
        sock = environ.get("gunicorn.socket")
        chunked = "chunked" in environ.get("HTTP_TRANSFER_ENCODING", "").lower()
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        if sock is None or not (length > 0 or chunked):
            return self.wsgi_app(environ, start_response)
        body = CountedBody(environ["wsgi.input"], None if chunked else length)
        environ["wsgi.input"] = body
        unread = []

        def answered(status, headers, exc_info=None):
            if not body.done:
                unread.append(True)  # answered without the whole body: read none of the rest
            return start_response(status, headers, exc_info)

        self._watch(id(body), sock, body)
        try:
            response = self.wsgi_app(environ, answered)
            if unread and body.length is not None and body.length - body.received <= DRAIN_LIMIT:
                # A small rest (a viewer's refused form) is read, still under the rate rule,
                # so the client reads its 403 page instead of a reset connection; only a
                # large unread body (a flood, an upload refused) ends the connection.
                try:
                    body.read()
                    unread.clear()
                except (RequestTimeout, ClientDisconnected):
                    pass
        finally:
            with self._lock:
                self._watched.pop(id(body), None)
        return HangUpAfter(response, sock) if unread else response

    def _watch(self, key: int, sock: socket.socket, body: CountedBody) -> None:
        with self._lock:
            self._watched[key] = (sock, body, time.monotonic())
            if self._watcher_pid != os.getpid():  # none yet in this (forked) process
                self._watcher_pid = os.getpid()
                threading.Thread(target=self._watch_bodies, name="slow-bodies",
                                 daemon=True).start()
        self._wake.set()

    def _watch_bodies(self) -> None:
        while True:
            with self._lock:
                watched = list(self._watched.values())
                if not watched:
                    self._wake.clear()
            if not watched:
                self._wake.wait()  # asleep until a body comes: nothing to do when idle
                continue
            now = time.monotonic()
            for sock, body, started in watched:
                if body.done or body.timed_out:
                    continue
                if now > started + self.grace + body.received / self.min_rate:
                    body.timed_out = True
                    log.warning("cut off a request body arriving too slowly (%d bytes in "
                                "%.0f s)", body.received, now - started)
                    stop_reading(sock)
            time.sleep(self.tick)


def init_app(app: Flask) -> None:
    app.url_map.converters["int"] = BoundedInt  # before the blueprints add their routes
    app.register_error_handler(SecurityError, untrusted_host)
    app.wsgi_app = SlowBodies(SecurityHeaders(app.wsgi_app))


def init_long_polls(app: Flask) -> None:
    """After the access policy's hook: only a caller already let in may hold a slot."""
    app.extensions["long_polls"] = LongPolls(app.config["LONG_POLLS_PER_WORKER"])
    app.before_request(take_long_poll)
    app.teardown_request(give_back_long_poll)
