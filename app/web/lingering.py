"""Closing a connection without waiting on it: after an answer sent before its request's
body arrived, and whenever gunicorn's gthread closes a connection it will not keep. The
half-closed socket is read and thrown away for a moment by one thread (LINGERING), so the
kernel does not answer data still arriving with a reset that could cost the client its
response, and no thread that serves requests waits for that data (app/web/bodies.py)."""

from __future__ import annotations

import os
import select
import socket
import sys
import threading
import time

READ_PIECE = 64 * 1024
MOST_BYTES = 1024 * 1024  # thrown away from one connection at the most, then it is closed


class Lingering:
    """Connections answered before their body arrived, read and thrown away by one thread
    for a moment before they are closed. Closed at once, the kernel would answer the body
    still arriving with a reset, and a client busy sending it (a form posted in two writes)
    could lose the answer it had been sent; no worker thread waits for that body."""

    def __init__(self, seconds: float = 2.0, most: int = 256):
        self.seconds, self.most = seconds, most
        self._lock = threading.Lock()
        self._socks: dict[socket.socket, tuple[float, int]] = {}
        self._wake = threading.Event()
        self._pid: int | None = None

    def add(self, sock: socket.socket) -> None:
        try:
            own = sock.dup()  # the connection outlives the server's own close of it
            own.setblocking(False)
        except OSError:
            return
        with self._lock:
            if len(self._socks) >= self.most:
                own.close()
                return
            self._socks[own] = (time.monotonic() + self.seconds, 0)
            if self._pid != os.getpid():
                self._pid = os.getpid()
                threading.Thread(target=self._run, name="lingering", daemon=True).start()
        self._wake.set()

    def _run(self) -> None:
        while True:
            with self._lock:
                socks = list(self._socks)
                if not socks:
                    self._wake.clear()
            if not socks:
                self._wake.wait()
                continue
            try:
                readable, _, _ = select.select(socks, [], [], 0.2)
            except (OSError, ValueError):
                readable = socks
            now = time.monotonic()
            for sock in socks:
                deadline, thrown = self._socks[sock]
                done = now > deadline or thrown > MOST_BYTES
                if sock in readable and not done:
                    try:
                        data = sock.recv(READ_PIECE)
                    except BlockingIOError:
                        data = b"?"
                    except OSError:
                        data = b""
                    done = not data
                    with self._lock:
                        self._socks[sock] = (deadline, thrown + len(data))
                if done:
                    with self._lock:
                        self._socks.pop(sock, None)
                    sock.close()


LINGERING = Lingering()


def close_lingering(sock: socket.socket, timeout: float = 2.0, max_drain: int = 65536) -> None:
    """gunicorn's close_graceful (RFC 9112 section 9.6: send FIN, read what the client is
    still sending, then close, so the kernel does not answer that data with a reset that
    could cost the client its response), with the lingering done by LINGERING's thread.
    gthread calls close_graceful on the worker's one event-loop thread, the thread that
    accepts and dispatches every connection: each client still trickling a body held the
    whole worker for its two seconds, one connection after another (24 of them froze pages
    and /healthz for tens of seconds). `linger_in_a_thread` puts it in gunicorn's place."""
    try:
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass  # not connected any more: nothing to linger for
    else:
        LINGERING.add(sock)
    try:
        sock.close()
    except OSError:
        pass


def linger_in_a_thread() -> None:
    """Under gunicorn (its util module loaded: this process serves through it), its
    close_graceful becomes close_lingering. gthread looks the function up on the module at
    each close, so this holds for every connection the worker closes. A server hook would
    do it too, but gunicorn.conf.py keeps none (nothing there may start anything)."""
    server_util = sys.modules.get("gunicorn.util")
    if server_util is not None and hasattr(server_util, "close_graceful"):
        server_util.close_graceful = close_lingering
