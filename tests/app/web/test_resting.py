"""A web worker at rest closes its idle connections and trims its heap (app/web/resting.py);
bench/idle.py measures what that gives back."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

from app.web.resting import Rest


def wait_until(what, check, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def test_a_rest_sheds_once_after_the_quiet_and_its_thread_ends():
    shed = []
    # (a quiet long enough that no stall of a loaded machine ends it between two lines)
    rest = Rest(lambda: shed.append(time.monotonic()), after=1.0)
    rest.touch()
    first = rest.thread
    rest.touch()  # a second request inside the quiet: still one watch
    assert rest.watching and rest.thread is first
    wait_until("the shed", lambda: shed)
    assert shed[0] - rest.last >= 1.0  # not before the quiet
    wait_until("the watch to end", lambda: not rest.thread.is_alive())
    assert not rest.watching
    time.sleep(0.5)
    assert len(shed) == 1  # nothing more without another request
    rest.touch()  # the next request starts another watch
    wait_until("the second shed", lambda: len(shed) == 2)


def test_requests_that_keep_coming_put_the_rest_off():
    shed, touched = [], []
    rest = Rest(lambda: shed.append(time.monotonic()), after=0.4)
    started = time.monotonic()
    while time.monotonic() - started < 1.2:  # a request every 0.05 s for 1.2 s
        rest.touch()
        touched.append(rest.last)
        time.sleep(0.05)
    wait_until("the shed once they stop", lambda: shed)
    # every shed came after a quiet of 0.4 s: none while requests kept coming (only a
    # machine that stalled this loop for that long could give one a quiet mid-way)
    for at in shed:
        assert not [t for t in touched if at - 0.4 < t <= at], (at, touched)
    assert shed[-1] - touched[-1] >= 0.4


def test_a_resting_worker_closes_its_idle_connections_and_serves_on(make_app):
    app = make_app(REST_AFTER=2.0)  # no stall between a request and a look ends it
    pool = app.extensions["db"].engine.pool
    local = threading.local()

    def read(_):
        if not hasattr(local, "client"):
            local.client = app.test_client()
        return local.client.get("/").status_code

    with ThreadPoolExecutor(4) as readers:  # threads at once: each holds a connection
        assert set(readers.map(read, range(40))) == {200}
    assert pool.idle  # kept for the next requests while busy
    wait_until("the idle connections closed", lambda: not pool.idle)
    assert app.test_client().get("/").status_code == 200  # a connection opened again
    assert len(pool.idle) == 1
    wait_until("the rest after it", lambda: not pool.idle)
