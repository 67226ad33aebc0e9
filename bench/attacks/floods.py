"""Floods: slow bodies trickled by strangers or a runner token, long polls beside them, and
a watcher asking /healthz and the owner's home page all the while."""

from __future__ import annotations

import socket
import threading
import time

from bench.attacks.target import LIMIT, OWNER, Target, line


def trickle(target: Target, path: str, length: int, headers: dict[str, str], rate: float,
            stop_at: float, answers: list) -> None:
    """A POST promising `length` bytes, sent at `rate` bytes a second; records how long the
    server took to answer (or None if it never did while we sent)."""
    start = time.perf_counter()
    try:
        if "Tailscale-User-Login" in headers:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(target.socket)
        else:
            sock = socket.create_connection(("127.0.0.1", target.port))
    except OSError:
        answers.append((0, None))
        return
    with sock:
        head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        sock.sendall(f"POST {path} HTTP/1.1\r\n{head}Content-Length: {length}\r\n\r\n".encode())
        piece = max(1, int(rate / 4))
        sent = 0
        while time.monotonic() < stop_at and sent < length:
            try:
                sock.sendall(b" " * min(piece, length - sent))
            except OSError:
                break
            sent += piece
            sock.settimeout(0.25)
            try:
                got = sock.recv(200)
            except TimeoutError:
                continue
            except OSError:
                got = b""
            status = int(got.split()[1]) if got.startswith(b"HTTP/1.1 ") else 0
            answers.append((status, time.perf_counter() - start))
            return
    answers.append((0, None))


def watch(target: Target, stop_at: float, worst: dict) -> None:
    """/healthz over TCP and the owner's home through serve, again and again: the worst."""
    while time.monotonic() < stop_at:
        for kind, call in (("healthz", lambda: target.call("GET", "/healthz")),
                           ("home", lambda: target.call("GET", "/", who=OWNER))):
            status, _, seconds = call()
            worst[kind] = max(worst.get(kind, 0.0), seconds if status == 200 else LIMIT)
        time.sleep(0.2)


def long_polls(target: Target, n: int, stop_at: float) -> list[threading.Thread]:
    def poll(token: str):
        target.call("POST", "/api/v1/runner/register", token=token, body={"labels": {}})
        while time.monotonic() < stop_at:
            status, _, _ = target.call("POST", "/api/v1/runner/lease", token=token,
                                       body={"wait": 30}, timeout=40)
            if status in (0, 429):
                time.sleep(1)
    return [threading.Thread(target=poll, args=("runner" if i % 2 else "runner-2",),
                             daemon=True) for i in range(n)]


def flood(target: Target, what: str, strangers: int, polls: int, seconds: float,
          path: str, headers: dict, length: int, rate: float) -> dict:
    stop_at = time.monotonic() + seconds
    answers: list = []
    worst: dict = {}
    threads = [threading.Thread(target=trickle, args=(target, path, length, headers, rate,
                                                      stop_at, answers), daemon=True)
               for _ in range(strangers)]
    threads += long_polls(target, polls, stop_at)
    threads.append(threading.Thread(target=watch, args=(target, stop_at, worst), daemon=True))
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=seconds + 45)
    answered = [t for _, t in answers if t is not None]
    statuses = sorted({s for s, _ in answers})
    line(what, f"answered {len(answered)}/{strangers} {statuses}, worst answer "
         f"{max(answered, default=0):.2f} s", time.perf_counter() - start)
    line(f"  meanwhile (+{polls} long polls)", f"/healthz worst {worst.get('healthz', 0):.2f} s, "
         f"owner / worst {worst.get('home', 0):.2f} s", seconds)
    return worst
