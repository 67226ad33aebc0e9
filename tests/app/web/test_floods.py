"""Finding 1 of the hardening issue, against the real web (gunicorn gthread): requests that
would keep every worker thread. A worker here has few threads on purpose, so a thread held
where it should not be shows as an answer that never comes (each wait is bounded; nothing
here measures how long anything took: bench/load.py does that).

  - a body the web answered without reading (a refusal) is not read afterwards: the
    connection is closed instead of drained a byte a second;
  - a body from a caller who was let in must keep arriving: cut off with 408, and a body
    cut short (too slow, or the client gone) never saves part of a note;
  - long polls hold at most half a worker's threads, one per runner; beyond that 429 at
    once, with Retry-After;
  - a refusal is answered on the headers alone, never after waiting for the body, and a
    caller let in has only a few bodies still arriving at once (429 beyond that).
"""

from __future__ import annotations

import http.client
import json
import select
import socket
import threading
import time

import pytest

from app import create_app
from tests.helpers import OWNER, add_token, bearer
from tests.tailnet import SERVE_HOST, WebServer, as_serve_sends, fetch

BOUND = 30  # seconds any single wait may take before the test gives up


@pytest.fixture
def small_web(data_dir):
    """One worker with four threads: two for long polls at most."""
    server = WebServer(data_dir, COMMONPLACE_AUTH="serve", COMMONPLACE_OWNERS=OWNER,
                       COMMONPLACE_HOSTS=SERVE_HOST, COMMONPLACE_WEB_WORKERS="1",
                       COMMONPLACE_WEB_THREADS="4")
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def patient_web(data_dir):
    """One worker with four threads, which waits ten minutes for a body before cutting it
    off: any answer a test gets within BOUND was given without waiting for the body."""
    server = WebServer(data_dir, COMMONPLACE_AUTH="serve", COMMONPLACE_OWNERS=OWNER,
                       COMMONPLACE_HOSTS=SERVE_HOST, COMMONPLACE_WEB_WORKERS="1",
                       COMMONPLACE_WEB_THREADS="4", COMMONPLACE_BODY_GRACE="600")
    try:
        yield server
    finally:
        server.close()


def token(data_dir, name: str, role: str) -> str:
    app = create_app({"DATA_DIR": data_dir, "DATABASE_URL":
                      f"sqlite:///{data_dir}/commonplace.db", "AUTH_MODE": "serve"})
    try:
        return add_token(app.extensions["db"], name, role)
    finally:
        app.extensions["db"].engine.dispose()


def entries(server) -> list[str]:
    status, _, body = server.via_serve("/api/v1/entries?kind=entry", as_serve_sends(OWNER))
    assert status == 200
    return [e["title"] for e in json.loads(body)["entries"]]


def open_post(port: int, path: str, length: int, headers: dict[str, str]) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=BOUND)
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    sock.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{head}"
                 f"Content-Length: {length}\r\n\r\n".encode())
    return sock


def open_post_via_serve(path: str, socket_path: str, length: int,
                        headers: dict[str, str]) -> socket.socket:
    """A POST as serve forwards it, its headers and the first bytes of its body sent."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(BOUND)
    sock.connect(socket_path)
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    sock.sendall(f"POST {path} HTTP/1.1\r\n{head}Content-Length: {length}\r\n\r\n"
                 "title=x&".encode())
    return sock


def answer_then_hang_up(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (bounded by BOUND)."""
    received = b""
    try:
        while chunk := sock.recv(65536):
            received += chunk
    except ConnectionResetError:
        pass  # a hang-up too: the server closed with our trickled bytes unread behind it
    return received


def trickle(sockets: list[socket.socket], stop: threading.Event) -> None:
    """A byte a second on every connection still open: fast enough that no per-read
    timeout of the server's ever fires, far too slow to ever finish a megabyte."""
    while not stop.wait(1):
        for sock in sockets:
            try:
                sock.send(b" ")
            except OSError:
                pass  # hung up on: as it should be


def test_refused_slow_bodies_hold_no_thread(small_web):
    """Twelve POSTs promising a megabyte, with no identity, sending a byte a second: each
    is refused and hung up on. Were the refused bodies drained before the connection is
    reused, four of them would hold all four threads, and the fifth would get no answer."""
    sockets = [open_post(small_web.port, "/api/v1/entries", 1_000_000,
                         {"Content-Type": "application/json"}) for _ in range(12)]
    stop = threading.Event()
    sender = threading.Thread(target=trickle, args=(sockets, stop), daemon=True)
    sender.start()
    try:
        for sock in sockets:
            answer = answer_then_hang_up(sock)
            assert answer.startswith(b"HTTP/1.1 403 "), answer[:200]
    finally:
        stop.set()
        sender.join(timeout=BOUND)
        for sock in sockets:
            sock.close()
    assert fetch(small_web.base + "/healthz")[0] == 200
    assert entries(small_web) == []


@pytest.mark.parametrize("path, ctype, body", [
    ("/entries/new", "application/x-www-form-urlencoded",
     b"date=2024-03-27&title=Half&body=" + b"x" * 200),
    ("/api/v1/entries", "application/json", json.dumps({"title": "Half", "body": "x" * 200})
     .encode()),
])
def test_a_body_cut_short_saves_nothing(small_web, data_dir, path, ctype, body):
    """An owner's write whose body stops halfway: the client goes away, or sends so slowly
    that the web cuts it off (408). Neither saves the half that arrived."""
    owner = bearer(token(data_dir, "cli", "owner"))
    gone = open_post(small_web.port, path, len(body), {**owner, "Content-Type": ctype})
    gone.sendall(body[: len(body) // 2])
    gone.shutdown(socket.SHUT_WR)  # the client went away mid-body
    assert answer_then_hang_up(gone).startswith(b"HTTP/1.1 400 ")
    gone.close()

    slow = open_post(small_web.port, path, len(body), {**owner, "Content-Type": ctype})
    slow.sendall(body[: len(body) // 2])
    try:
        slow.settimeout(1)
        answer = b""
        deadline = time.monotonic() + BOUND  # the web's own limit is 10 s; this is a bound
        while time.monotonic() < deadline:
            try:
                slow.sendall(b"x")  # a byte a second: under any honest link's pace
                chunk = slow.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                break
            if not chunk:
                break
            answer += chunk
        assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
    finally:
        slow.close()
    assert entries(small_web) == []


def test_long_polls_leave_threads_for_everyone_else(small_web, data_dir):
    """A runner token sending twelve long polls at once holds one; a second runner holds
    the second slot of this worker (half its four threads); the rest are told 429 with
    Retry-After at once, and pages and /healthz are answered while the two wait."""
    runners = [bearer(token(data_dir, f"runner-{i}", "runner")) for i in range(3)]
    json_type = {"Content-Type": "application/json"}
    for headers in runners:
        status, _, _ = fetch(small_web.base + "/api/v1/runner/register", method="POST",
                             headers={**headers, **json_type}, body=b'{"labels": {}}')
        assert status == 200
    answers: list[tuple[int, dict]] = []
    lock = threading.Lock()

    def lease(headers):
        # wait 30 s, the most a runner may ask for: the two held polls outlast the test
        conn = http.client.HTTPConnection("127.0.0.1", small_web.port, timeout=BOUND + 30)
        try:
            conn.request("POST", "/api/v1/runner/lease", body=b'{"wait": 30}',
                         headers={**headers, **json_type})
            response = conn.getresponse()
            answer = (response.status, dict(response.getheaders()))
        except OSError:  # the server stopped at the end of the test
            answer = (0, {})
        finally:
            conn.close()
        with lock:
            answers.append(answer)

    flood = [threading.Thread(target=lease, args=(runners[0],), daemon=True)
             for _ in range(12)]
    for thread in flood:
        thread.start()
    wait_for(lambda: len(answers) >= 11)
    others = [threading.Thread(target=lease, args=(r,), daemon=True) for r in runners[1:]]
    for thread in others:
        thread.start()
    wait_for(lambda: len(answers) >= 12)

    refused = [got for status, got in answers if status == 429]
    # eleven of the flood, and whichever of the other two runners came second
    assert len(refused) == 12, answers
    assert all(got["Retry-After"] == "5" for got in refused)
    # the two polls that were let in are still waiting, and everyone else is answered
    assert sum(thread.is_alive() for thread in [*flood, *others]) == 2
    assert fetch(small_web.base + "/healthz")[0] == 200
    assert small_web.via_serve("/", as_serve_sends(OWNER))[0] == 200
    assert sum(thread.is_alive() for thread in [*flood, *others]) == 2


def wait_for(condition, bound: float = BOUND) -> None:
    deadline = time.monotonic() + bound
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("the web did not get there within the bound")
        time.sleep(0.1)


def test_refused_trickled_bodies_are_answered_at_once(patient_web):
    """24 tailnet strangers each promise a 60 kB form and send it a byte a second: each is
    refused (403) on its headers, without the web waiting for the rest of its body, and the
    owner's home page and /healthz are answered while all 24 are still sending."""
    stranger = {**as_serve_sends("stranger@example.net"),
                "Content-Type": "application/x-www-form-urlencoded"}
    sockets = [open_post_via_serve("/entries/new", patient_web.socket_path, 60_000, stranger)
               for _ in range(24)]
    stop = threading.Event()
    sender = threading.Thread(target=trickle, args=(sockets, stop), daemon=True)
    sender.start()
    try:
        assert fetch(patient_web.base + "/healthz")[0] == 200
        assert patient_web.via_serve("/", as_serve_sends(OWNER))[0] == 200
        for sock in sockets:
            answer = answer_then_hang_up(sock)
            assert answer.startswith(b"HTTP/1.1 403 "), answer[:200]
    finally:
        stop.set()
        sender.join(timeout=BOUND)
        for sock in sockets:
            sock.close()
    assert entries(patient_web) == []


def test_a_callers_bodies_still_arriving_are_capped(patient_web, data_dir):
    """One runner token opens six registrations and trickles their bodies: the worker reads
    at most one body still arriving (a quarter of its four threads); the other five are
    told 429 with Retry-After after a moment, long before their bodies could arrive, and
    pages and /healthz are answered meanwhile."""
    runner = bearer(token(data_dir, "runner-0", "runner"))
    sockets = [open_post(patient_web.port, "/api/v1/runner/register", 60_000,
                         {**runner, "Content-Type": "application/json"}) for _ in range(6)]
    stop = threading.Event()
    sender = threading.Thread(target=trickle, args=(sockets, stop), daemon=True)
    sender.start()
    answers: dict[socket.socket, bytes] = {}
    try:
        deadline = time.monotonic() + BOUND
        while len(answers) < 5 and time.monotonic() < deadline:
            ready, _, _ = select.select([s for s in sockets if s not in answers], [], [], 1)
            for sock in ready:
                answers[sock] = answer_then_hang_up(sock)
        assert fetch(patient_web.base + "/healthz")[0] == 200
        assert patient_web.via_serve("/", as_serve_sends(OWNER))[0] == 200
    finally:
        stop.set()
        sender.join(timeout=BOUND)
        for sock in sockets:
            sock.close()
    refused = [a for a in answers.values() if a.startswith(b"HTTP/1.1 429 ")]
    assert len(refused) == 5, [a[:40] for a in answers.values()]
    assert all(b"Retry-After: 5" in a for a in refused)


@pytest.fixture
def roomy_web(data_dir):
    """One worker with sixteen threads, patient as patient_web: four bodies still arriving
    at once in all, two of them one caller's."""
    server = WebServer(data_dir, COMMONPLACE_AUTH="serve", COMMONPLACE_OWNERS=OWNER,
                       COMMONPLACE_HOSTS=SERVE_HOST, COMMONPLACE_WEB_WORKERS="1",
                       COMMONPLACE_WEB_THREADS="16", COMMONPLACE_BODY_GRACE="600")
    try:
        yield server
    finally:
        server.close()


def test_bodies_still_arriving_are_counted_per_caller_not_per_address(roomy_web, data_dir):
    """Two runners behind one address (127.0.0.1), each with three registrations whose
    bodies have begun to arrive: each runner's third is told 429, and each runner
    keeps its own two, which are answered once their bodies are whole. Counted by address,
    the second runner would have been refused outright."""
    start = b'{"labels": {}}'
    length = len(start) + 5000  # the rest is JSON whitespace, sent at the end
    held: dict[str, list[socket.socket]] = {}
    try:
        for name in ("runner-a", "runner-b"):
            runner = bearer(token(data_dir, name, "runner"))
            sockets = [open_post(roomy_web.port, "/api/v1/runner/register", length,
                                 {**runner, "Content-Type": "application/json"})
                       for _ in range(3)]
            for sock in sockets:
                sock.sendall(start)
            ready, _, _ = select.select(sockets, [], [], BOUND)
            assert len(ready) == 1, f"{name}: {len(ready)} answered before their bodies"
            assert answer_then_hang_up(ready[0]).startswith(b"HTTP/1.1 429 ")
            held[name] = [s for s in sockets if s is not ready[0]]
        for name, sockets in held.items():
            for sock in sockets:
                sock.sendall(b" " * (length - len(start)))
                answer = sock.recv(65536)
                assert answer.startswith(b"HTTP/1.1 200 "), (name, answer[:200])
    finally:
        for sockets in held.values():
            for sock in sockets:
                sock.close()


def test_a_burst_of_bodies_on_their_way_is_never_refused(roomy_web, data_dir):
    """An owner's script saves eight notes at once, each sent as http.client sends it: the
    headers, then the body in a second write, here a moment later (as a busy host delays
    it). The caller has two slots for bodies still arriving, but these bodies are not slow:
    each arrives within the moment a body over its share is given, so every save lands (a
    429 here is a refusal of bodies that were already on their way)."""
    script = {**bearer(token(data_dir, "script", "owner")), "Content-Type": "application/json"}
    bodies = [json.dumps({"title": f"Burst {i}", "body": "x"}).encode() for i in range(8)]
    sockets = [open_post(roomy_web.port, "/api/v1/entries", len(body), script)
               for body in bodies]
    try:
        time.sleep(0.1)  # the headers are read, the bodies not here yet
        for sock, body in zip(sockets, bodies, strict=True):
            sock.sendall(body)
        answers = [sock.recv(65536) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()
    assert [a[:13] for a in answers] == [b"HTTP/1.1 201 "] * 8, [a[:200] for a in answers]
    assert sorted(entries(roomy_web)) == sorted(f"Burst {i}" for i in range(8))
