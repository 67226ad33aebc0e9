"""A runner waiting for a server that does not answer yet: a loopback port with nothing
listening on it, which starts answering when the test says so. A slow start (the web
beside `commonplace up` on a loaded machine) is waited for quietly; a server silent for
longer than the runner's patience is named once, in plain words."""

import json
import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from jobs.runner.agent import Agent
from jobs.runner.client import Client
from jobs.runner.waiting import FIRST_S, MOST_S, Silence
from tests.helpers import free_port


class Registrar(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 (http.server's naming)
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        payload = json.dumps({"runner": "local", "heartbeat_s": 15}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


def _register_until(agent, caplog, ready, port):
    """Register in a thread; once ready(records) holds, start answering on port, and
    return every record once the agent has registered."""
    registering = threading.Thread(target=agent.register, daemon=True)
    registering.start()
    httpd = None
    try:
        deadline = time.monotonic() + 30
        while not ready(caplog.records) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert ready(caplog.records)
        httpd = ThreadingHTTPServer(("127.0.0.1", port), Registrar)
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        registering.join(timeout=30)
        assert not registering.is_alive()
    finally:
        agent.stopping.set()
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
    return [(r.levelname, r.getMessage()) for r in caplog.records]


def test_a_server_still_starting_is_waited_for_without_a_warning(tmp_path, caplog):
    """`commonplace up` starts its runner beside the web, which listens a few seconds
    later: the runner's first refused connections say it waits, and warn of nothing."""
    caplog.set_level(logging.INFO, logger="commonplace.runner")
    port = free_port()  # nothing listening on it yet
    agent = Agent(Client(f"http://127.0.0.1:{port}", "cp_x", timeout=5), tmp_path, labels={})
    said = _register_until(agent, caplog, bool, port)  # answers once it has said a word
    assert said[-1] == ("INFO", "registered as local (heartbeat 15.0s)")
    assert said[0][0] == "INFO" and said[0][1].startswith(
        f"waiting for the server at http://127.0.0.1:{port} (")
    assert all(level == "INFO" for level, _ in said)


def test_a_slow_start_is_retried_quietly(tmp_path, caplog):
    caplog.set_level(logging.DEBUG, logger="commonplace.runner")
    port = free_port()
    server = f"http://127.0.0.1:{port}"
    agent = Agent(Client(server, "cp_x", timeout=5), tmp_path, labels={}, patience_s=600)

    def retried_twice(records):
        return sum(r.levelname == "DEBUG" for r in records) >= 2

    said = _register_until(agent, caplog, retried_twice, port)
    assert said[0] == ("INFO", f"waiting for the server at {server} (nothing is listening "
                               "there); retrying quietly")
    assert said[-1] == ("INFO", "registered as local (heartbeat 15.0s)")
    assert [level for level, _ in said[1:-1]] == ["DEBUG"] * (len(said) - 2)
    assert not any("fail" in message for _, message in said)


def test_a_server_silent_past_the_patience_is_named_once_in_plain_words(tmp_path, caplog):
    caplog.set_level(logging.DEBUG, logger="commonplace.runner")
    port = free_port()
    server = f"http://127.0.0.1:{port}"
    agent = Agent(Client(server, "cp_x", timeout=5), tmp_path, labels={}, patience_s=0.2)

    def warned_then_retried(records):
        levels = [r.levelname for r in records]
        return "WARNING" in levels and "DEBUG" in levels[levels.index("WARNING"):]

    said = _register_until(agent, caplog, warned_then_retried, port)
    warnings = [message for level, message in said if level == "WARNING"]
    assert len(warnings) == 1
    assert warnings[0].startswith(f"the server at {server} has not answered for ")
    assert "(nothing is listening there). Is the web running, and is this the right " \
           "address?" in warnings[0]
    assert "Errno" not in warnings[0] and "urlopen" not in warnings[0]
    assert said[-2][0] == "INFO" and said[-2][1].startswith(
        f"the server at {server} answers again after ")
    assert said[-1] == ("INFO", "registered as local (heartbeat 15.0s)")


def test_the_waits_grow_and_are_bounded_and_start_over_once_answered():
    silence = Silence("http://127.0.0.1:9", logging.getLogger("commonplace.runner"), 600)
    waits = [silence.failed("connection refused") for _ in range(8)]
    assert waits[0] == FIRST_S and waits[-1] == MOST_S
    assert all(a <= b <= MOST_S for a, b in zip(waits, waits[1:], strict=False))
    silence.answered()
    assert silence.failed("connection refused") == FIRST_S
