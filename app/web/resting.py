"""A web worker at rest gives back what serving grew.

Under load each of a worker's threads holds a database connection, and each connection
its page cache and statements; the requests' garbage leaves the C heap (malloc) holding
freed pages it keeps for later. A personal notebook is idle most of the day, and the
machine it shares with experiments wants that memory back. So REST_AFTER seconds after
its last request a worker closes its idle connections (IdlePool.shed) and asks malloc to
return its free pages to the system (glibc's malloc_trim; a no-op elsewhere): a worker
at rest is smaller than one just served (bench/idle.py prints both; docs/PERFORMANCE.md,
*At rest*).

The first request after a rest opens a connection again (bench/idle.py prints what that
costs). The runner's long poll ends every poll interval and counts as a request, so a
worker with a runner attached rests between polls: a connection opened once per poll.
A thread waits out the quiet after a request and sheds, then ends: a resting worker has
no thread to wake (bench/idle.py's CPU).
"""

from __future__ import annotations

import ctypes
import threading
import time
import weakref
from collections.abc import Callable

from flask import Flask

REST_AFTER = 10.0  # seconds without a request (a test app sets config["REST_AFTER"])


def malloc_trim() -> None:
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


class Rest:
    """Calls `shed` once `after` seconds pass with no call of `touch`, from a thread that
    lives from a request to the shed that follows it: none while the worker rests."""

    def __init__(self, shed: Callable[[], None], after: float):
        self.shed, self.after = shed, after
        self.last = 0.0
        self.watching = False
        self.thread: threading.Thread | None = None  # the latest watch
        self._lock = threading.Lock()

    def touch(self, _exc: BaseException | None = None) -> None:
        with self._lock:
            self.last = time.monotonic()
            if self.watching:
                return
            self.watching = True
        self.thread = threading.Thread(target=self._watch, name="rest", daemon=True)
        self.thread.start()

    def _watch(self) -> None:
        while True:
            with self._lock:
                quiet = time.monotonic() - self.last
                if quiet >= self.after:
                    self.watching = False  # a request from now on starts another watch
                    break
            time.sleep(self.after - quiet)
        self.shed()


def init_app(app: Flask) -> None:
    the_app = weakref.ref(app)  # a watch does not keep an app alive (tests make hundreds)

    def shed() -> None:
        if (app := the_app()) is not None:
            app.extensions["db"].shed()
            malloc_trim()

    rest = Rest(shed, app.config.get("REST_AFTER", REST_AFTER))
    app.extensions["rest"] = rest
    app.teardown_request(rest.touch)
