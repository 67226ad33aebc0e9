"""The runner agent's HTTP client against a stand-in server on loopback: only the
server's word that a lease is stale stops a job; other refusals are told apart. And how
the agent forwards the end of a run that the lab's launcher has already classified
(the classification itself is tested with the launcher, in tests/jobs/lab)."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from app.journal import runs
from base.contract import LAB_REASONS
from jobs.runner.client import Busy, Client, Refused, Stale, Unreachable
from jobs.runner.outcome import outcome

ANSWERS = {
    "/stale": (409, {"error": {"code": "stale_lease", "message": "stop"}}),
    "/gap": (409, {"error": {"code": "log_gap", "message": "gap", "size": 7}}),
    "/state": (409, {"error": {"code": "bad_state", "message": "no"}}),
    "/invalid": (422, {"error": {"code": "invalid", "message": "bad", "field": "x"}}),
    "/broken": (500, {"error": {"code": "internal", "message": "oops"}}),
    "/ok": (200, {"fine": True}),
    "/busy": (429, {"error": {"code": "too_many_requests", "message": "later"}}),
}


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 (http.server's naming)
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        status, body = ANSWERS[self.path]
        payload = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        if status == 429:
            self.send_header("Retry-After", "7")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_error_answers_map_to_what_the_agent_does(server):
    client = Client(server, "cp_x", timeout=5)
    assert client.call("POST", "/ok", {}) == {"fine": True}
    with pytest.raises(Stale):
        client.call("POST", "/stale", {})
    with pytest.raises(Refused) as gap:
        client.call("POST", "/gap", {})
    assert gap.value.code == "log_gap" and gap.value.details["size"] == 7
    with pytest.raises(Refused) as state:
        client.call("POST", "/state", {})
    assert state.value.code == "bad_state"  # a 409 that is not about the lease
    with pytest.raises(Refused):
        client.call("POST", "/invalid", {})
    with pytest.raises(Unreachable):
        client.call("POST", "/broken", {})
    with pytest.raises(Busy) as busy:  # too many long polls: wait as told, then poll again
        client.call("POST", "/busy", {})
    assert busy.value.retry_after == 7


def test_an_unreachable_server_is_unreachable():
    with pytest.raises(Unreachable):
        Client("http://127.0.0.1:9", "cp_x", timeout=2).call("POST", "/x", {})


@pytest.mark.parametrize("rc, result, cancelled, expected", [
    (0, {}, False, ("SUCCEEDED", "")),
    (3, {"reason": {"message": "grad of w differs by 1e-3"}}, False, ("FAILED", "correctness")),
    (3, {"reason": {"code": "correctness", "message": "strategy dp_naive: grad of w differs"}},
     False, ("FAILED", "correctness")),
    (7, None, False, ("CANCELLED", "cancelled")),
    (-9, None, True, ("CANCELLED", "cancelled")),
    (-9, None, False, ("FAILED", "signal")),
    (4, {"reason": {"code": "out_of_memory", "message": "rank 0 failed: torch.OutOfMemoryError"}},
     False, ("FAILED", "out_of_memory")),
    (4, {"reason": {"code": "collective_timeout",
                    "message": "rank 1: Timed out waiting 60s for all_reduce"}}, False,
     ("FAILED", "collective_timeout")),
    (4, {"reason": {"code": "rank_failed", "message": "rank 1 failed: ValueError: x"}}, False,
     ("FAILED", "rank_failed")),
    (4, None, False, ("FAILED", "rank_failed")),
    (5, None, False, ("FAILED", "timeout")),
    (6, None, False, ("FAILED", "unsupported")),
    (1, None, False, ("FAILED", "exit_code")),
    (1, {"reason": {"code": "no_such_code", "message": "?"}}, False, ("FAILED", "exit_code")),
])
def test_the_launchers_verdict_is_forwarded(rc, result, cancelled, expected):
    status, reason, code = outcome(rc, result, cancelled)
    assert (status, code) == expected
    if result and result.get("reason"):
        assert reason == result["reason"]["message"]


@pytest.mark.parametrize("lab_reason", LAB_REASONS)
def test_every_lab_reason_reaches_the_server_as_one_it_accepts(lab_reason):
    _, _, code = outcome(4, {"reason": {"code": lab_reason, "message": "m"}}, False)
    assert code in runs.REASON_CODES  # what the server accepts from a runner
