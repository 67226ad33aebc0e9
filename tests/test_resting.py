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
    rest = Rest(lambda: shed.append(time.monotonic()), after=0.3)
    rest.touch()
    rest.touch()  # a second request inside the quiet: still one watch
    assert rest.watching
    wait_until("the shed", lambda: shed)
    assert shed[0] - rest.last >= 0.3  # not before the quiet
    wait_until("the watch to end", lambda: not rest.thread.is_alive())
    assert not rest.watching
    time.sleep(0.5)
    assert len(shed) == 1  # nothing more without another request
    rest.touch()  # the next request starts another watch
    wait_until("the second shed", lambda: len(shed) == 2)


def test_requests_that_keep_coming_put_the_rest_off():
    shed = []
    rest = Rest(lambda: shed.append(True), after=0.4)
    started = time.monotonic()
    while time.monotonic() - started < 1.2:  # a request every 0.05 s for 1.2 s
        rest.touch()
        time.sleep(0.05)
        assert not shed
    wait_until("the shed once they stop", lambda: shed)


def test_a_resting_worker_closes_its_idle_connections_and_serves_on(make_app):
    app = make_app(REST_AFTER=0.3)
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
