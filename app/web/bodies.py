"""Request bodies under gunicorn's gthread worker, which lends a request one of its few
threads for the whole request, reading the body included. A body sent slowly could keep
every thread, so:

  - a request is refused on its headers alone (who is asking, which method, which route),
    and a refused body is never waited for: what has already arrived is read, so the
    client reads its answer on a connection that can be reused, and otherwise the
    connection is answered and closed;
  - a caller let in may have only a few bodies still arriving at once (per worker, and in
    all): beyond that a body gets a moment to arrive, then the answer is 429, so pages
    always have threads;
  - a body that is read must keep arriving: a grace, then a minimum average rate (Apache
    mod_reqtimeout's body=…,MinRate=… rule). Only time spent waiting for the client
    counts: a body that arrived whole is never cut off, however long the app took to read it.

docs/SECURITY.md is the threat model.
"""

from __future__ import annotations

import fcntl
import functools
import logging
import os
import socket
import struct
import termios
import threading
import time
from collections.abc import Callable

from flask import current_app, g, make_response, request
from werkzeug.exceptions import ClientDisconnected, RequestTimeout

from app.errors import error_response
from app.web.lingering import LINGERING

log = logging.getLogger(__name__)

# A body may take BODY_GRACE_S of waiting to start, then must average BODY_MIN_RATE bytes a
# second: 64 kbit/s, slower than any phone link, so only a sender that means to hold the
# thread is cut off.
BODY_GRACE_S = 10.0
BODY_MIN_RATE = 8 * 1024
READ_PIECE = 64 * 1024
DRAIN_LIMIT = 64 * 1024  # an unread rest up to this is read, if it has all arrived
RETRY_AFTER_S = 5
# A body over its caller's share of slots may take this long to arrive whole before it
# counts as slow (arrives_soon), looked at every ARRIVAL_POLL_S.
ARRIVAL_WAIT_S = 0.5
ARRIVAL_POLL_S = 0.01
ENVIRON_KEY = "commonplace.body"


def stop_reading(sock: socket.socket, how: int = socket.SHUT_RD) -> None:
    """Read nothing more from this connection: a recv blocked on it returns at once, and
    one made later finds the end of the stream instead of waiting for more."""
    try:
        sock.shutdown(how)
    except OSError:
        pass  # the client is gone already


def waiting_in_socket(sock: socket.socket) -> int:
    """Bytes the kernel holds for this connection, not yet read (FIONREAD)."""
    try:
        raw = fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0")
    except (OSError, ValueError):
        return 0
    return struct.unpack("i", raw)[0]


def buffered_by_server(stream) -> int:
    """Bytes of the body gunicorn has already taken from the socket and holds for the app
    (its Body's and its reader's buffers); 0 under a server that keeps none we can see."""
    held = 0
    for owner in (stream, getattr(getattr(stream, "reader", None), "unreader", None)):
        buf = getattr(owner, "buf", None)
        try:
            held += len(buf.getbuffer())
        except (AttributeError, TypeError, ValueError):
            pass
    return held


class HangUpAfter:
    """A response after which the connection ends, its body unread. gunicorn ignores an
    application's `Connection: close` (a hop-by-hop header) and would keep the connection,
    first reading whatever is left of the body in the worker's thread. So once the response
    is written (gunicorn then closes the iterable), the write side is shut (the client reads
    the answer, then the end), the rest of the body is left to LINGERING, and gunicorn is
    told the body failed (its Body.failed), so it closes the connection instead of reading
    it; a gunicorn without that flag gets the read side shut as well."""

    def __init__(self, response, sock: socket.socket, body: CountedBody):
        self.response, self.sock, self.body = response, sock, body

    def __iter__(self):
        return iter(self.response)

    def close(self) -> None:
        try:
            if hasattr(self.response, "close"):
                self.response.close()
        finally:
            stop_reading(self.sock, socket.SHUT_WR)
            if hasattr(self.body.stream, "failed"):
                self.body.stream.failed = True
                LINGERING.add(self.sock)
            else:
                stop_reading(self.sock, socket.SHUT_RD)


class CountedBody:
    """wsgi.input, counted, with the time spent waiting for the client. A body that ends
    before its Content-Length (the client went away, or was cut off for being slow) raises
    instead of reading as a shorter body: a form cut in half must never save half a note."""

    def __init__(self, stream, length: int | None, sock: socket.socket | None = None):
        self.stream, self.length, self.sock = stream, length, sock  # length None: chunked
        self.received = 0
        self.done = length == 0
        self.timed_out = False
        self.waited = 0.0  # seconds spent blocked in reads that have returned
        self.waiting_since: float | None = None  # when the read now blocked began
        self._give_back: Callable[[], None] | None = None  # a slot, held until read whole

    def hold(self, give_back: Callable[[], None]) -> None:
        """Hold a slot while this body arrives; give_back is called once it has."""
        self._give_back = give_back

    def let_go(self) -> None:
        give_back, self._give_back = self._give_back, None
        if give_back is not None:
            give_back()

    def waiting(self, now: float) -> float:
        """Seconds this body has kept the app waiting so far."""
        since = self.waiting_since
        return self.waited + (now - since if since is not None else 0.0)

    def arrived(self) -> bool:
        """Whether the rest of the body is already here (read from it would not wait)."""
        if self.done:
            return True
        if self.length is None or self.sock is None:
            return False  # a chunked body's end cannot be seen before it is read
        held = buffered_by_server(self.stream) + waiting_in_socket(self.sock)
        return self.received + held >= self.length

    def _ended_early(self) -> Exception:
        if self.timed_out:
            return RequestTimeout(f"the request body arrived too slowly (under "
                                  f"{BODY_MIN_RATE // 1024} KiB/s)")
        return ClientDisconnected()

    def _wait_for(self, read, size):
        self.waiting_since = time.monotonic()
        try:
            return read(size)
        except OSError as exc:  # gunicorn's NoMoreData, a reset
            raise self._ended_early() from exc
        finally:
            self.waited += time.monotonic() - self.waiting_since
            self.waiting_since = None

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
            size = READ_PIECE if want is None else min(want - len(out), READ_PIECE)
            piece = self._wait_for(self.stream.read, size)
            if not piece:
                if self.length is not None:
                    raise self._ended_early()
                self.done = True  # the end of a chunked body
                break
            out += piece
            self.received += len(piece)
        if self.length is not None and self.received >= self.length:
            self.done = True
        if self.done:
            self.let_go()
        return bytes(out)

    def readline(self, size: int | None = -1) -> bytes:
        data = self._wait_for(self.stream.readline, size)
        self.received += len(data)
        if self.length is not None and self.received >= self.length:
            self.done = True
        elif not data and size != 0:
            if self.length is not None:
                raise self._ended_early()
            self.done = True
        if self.done:
            self.let_go()
        return data

    def readlines(self, hint: int | None = -1) -> list[bytes]:
        return list(iter(self.readline, b""))

    def __iter__(self):
        return iter(self.readline, b"")


class SlowBodies:
    """WSGI middleware (under gunicorn): a body must keep arriving, and a body the app
    answered without reading (a refusal, a 413, a 429) is not waited for. A watcher thread
    cuts the connection's read side when a body keeps the app waiting too long (408);
    without it a POST with Content-Length: 1000000 sent a byte a second holds a thread
    for days."""

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
        body = CountedBody(environ["wsgi.input"], None if chunked else length, sock)
        environ["wsgi.input"] = environ[ENVIRON_KEY] = body
        unread = []

        def answered(status, headers, exc_info=None):
            if not body.done:
                unread.append(True)  # answered without the whole body: wait for none of it
            return start_response(status, headers, exc_info)

        self._watch(id(body), sock, body)
        try:
            response = self.wsgi_app(environ, answered)
            if (unread and body.length is not None
                    and body.length - body.received <= DRAIN_LIMIT and body.arrived()):
                # A small rest that is already here (a viewer's refused form) is read, so
                # the client reads its 403 page on a connection that stays usable; a rest
                # still on its way is never waited for: the connection ends instead.
                try:
                    body.read()
                    unread.clear()
                except (RequestTimeout, ClientDisconnected):
                    pass
        finally:
            with self._lock:
                self._watched.pop(id(body), None)
        return HangUpAfter(response, sock, body) if unread else response

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
                if body.waiting(now) > self.grace + body.received / self.min_rate:
                    body.timed_out = True
                    log.warning("cut off a request body arriving too slowly (%d bytes in "
                                "%.0f s)", body.received, now - started)
                    stop_reading(sock)
            time.sleep(self.tick)


class Slots:
    """What one worker lends at most `limit` of at once, and at most `per_holder` of to
    one caller: long polls (a runner has one lease request out at a time; twelve at once
    are a flood), bodies still arriving."""

    def __init__(self, limit: int, per_holder: int = 1):
        self.limit, self.per_holder = limit, per_holder
        self._lock = threading.Lock()
        self._held: dict[str, int] = {}

    def take(self, holder: str) -> bool:
        with self._lock:
            if (sum(self._held.values()) >= self.limit
                    or self._held.get(holder, 0) >= self.per_holder):
                return False
            self._held[holder] = self._held.get(holder, 0) + 1
            return True

    def give_back(self, holder: str) -> None:
        with self._lock:
            left = self._held.get(holder, 0) - 1
            if left > 0:
                self._held[holder] = left
            else:
                self._held.pop(holder, None)


def busy(message: str):
    """429 at once, with when to ask again."""
    body, status = error_response(429, "busy", f"{message}; ask again in {RETRY_AFTER_S} s")
    response = make_response(body, status)
    response.headers["Retry-After"] = str(RETRY_AFTER_S)
    return response


def take_body_slot() -> object:
    """before_request, after the access policy: a caller let in whose body is still on its
    way holds one of the worker's slots for arriving bodies until it has been read whole.
    Over its share, the body waits a moment (arrives_soon), and otherwise the answer is
    429, without waiting for the rest of the body."""
    body = request.environ.get(ENVIRON_KEY)
    if body is None or g.get("identity") is None or body.arrived():
        return None
    holder = g.identity.login
    slots = current_app.extensions["arriving_bodies"]
    if slots.take(holder):
        body.hold(functools.partial(slots.give_back, holder))
        return None
    waits = current_app.extensions["body_waits"]
    if waits.take(holder):
        try:
            if arrives_soon(body, slots, holder):
                return None
        finally:
            waits.give_back(holder)
    log.info("refused a body from %s still arriving: this worker reads as many as it lends",
             holder)
    return busy("too many of your request bodies are still arriving here")


def arrives_soon(body: CountedBody, slots: Slots, holder: str) -> bool:
    """Whether within ARRIVAL_WAIT_S the body arrives whole (then it is read without a
    slot) or one of the caller's slots comes free (then it holds it).

    Why wait at all: a client sends its headers and its body in two writes (http.client
    does), so a small body on its way at full speed may not be here yet when the headers
    are read, and on a busy host the second write may come well after the first. Counted
    as slow, such bodies had a script's burst of saves refused. A body that is slow is
    still here only in part after the moment. The waits one worker allows at once are
    capped too (body_waits, half its threads), so that with the slots for slow bodies
    they leave pages a quarter of the threads."""
    deadline = time.monotonic() + ARRIVAL_WAIT_S
    while time.monotonic() < deadline:
        time.sleep(ARRIVAL_POLL_S)
        if body.arrived():
            return True
        if slots.take(holder):
            body.hold(functools.partial(slots.give_back, holder))
            return True
    return False


def give_back_body_slot(_exc: BaseException | None) -> None:
    body = request.environ.get(ENVIRON_KEY)
    if body is not None:
        body.let_go()  # a body never read whole (a refusal, an error) still held its slot
