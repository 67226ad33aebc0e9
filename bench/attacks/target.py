"""The server under attack (`commonplace web` in serve mode, an owner and a viewer, on a
free loopback port and its own unix socket) and the one way every attack calls it."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from app import create_app
from app.cli import migrate
from app.models import Token
from app.notebook import entries
from app.web.auth.identity import hash_token, new_token
from bench.serving import ROOT, stop_server

OWNER, VIEWER, STRANGER = "owner@example.com", "viewer@example.com", "mallory@example.net"
SERVE = {"Host": "localhost", "X-Forwarded-Host": "notes.tail1234.ts.net",
         "X-Forwarded-Proto": "https", "X-Forwarded-For": "100.101.102.103"}
LIMIT = 30.0  # seconds any one request may take here before it counts as no answer
WORDS = "pipeline bubble gradient tensor shard collective bandwidth latency memory".split()


class Unix(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float = LIMIT):
        super().__init__("localhost", timeout=timeout)
        self.path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.path)


class Target:
    """The server, and every status it answered (for the 5xx count)."""

    def __init__(self, data_dir: Path, port: int, tokens: dict[str, str]):
        self.data_dir, self.port, self.tokens = data_dir, port, tokens
        self.socket = str(data_dir / "web.sock")
        self.statuses: list[int] = []
        self.lock = threading.Lock()

    def call(self, method: str, path: str, *, who: str | None = None, token: str | None = None,
             body=None, timeout: float = LIMIT, form: bool = False) -> tuple[int, bytes, float]:
        """(status, body, seconds); as `who` through serve's socket, or with a token over
        TCP. Status 0: no answer within `timeout`."""
        headers = {}
        if who is not None:
            conn = Unix(self.socket, timeout)
            headers = {**SERVE, "Tailscale-User-Login": who}
        else:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        if token is not None:
            headers["Authorization"] = f"Bearer {self.tokens[token]}"
        data = body
        if form:
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        if isinstance(body, (dict, list)):
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        start = time.perf_counter()
        try:
            conn.request(method, path, body=data, headers=headers)
            response = conn.getresponse()
            status, payload = response.status, response.read()
        except (OSError, http.client.HTTPException):
            status, payload = 0, b""
        finally:
            conn.close()
        with self.lock:
            self.statuses.append(status)
        return status, payload, time.perf_counter() - start


def line(what: str, result: str, seconds: float) -> None:
    print(f"{what:<58} {result:<44} {seconds:7.2f} s", flush=True)


def prepare(data_dir: Path, n_entries: int) -> dict[str, str]:
    app = create_app({"DATA_DIR": data_dir, "DATABASE_URL": f"sqlite:///{data_dir}/c.db",
                      "AUTH_MODE": "serve", "OWNERS": [OWNER], "TIMEZONE": "UTC"})
    migrate(app)
    secrets = {name: new_token() for name in ("owner", "runner", "runner-2")}
    with app.extensions["db"].write() as session:
        for name, secret in secrets.items():
            session.add(Token(name=name, role=name.split("-")[0], token_hash=hash_token(secret)))
        for i in range(n_entries):
            words = " ".join(WORDS[(i + k) % len(WORDS)] for k in range(30))
            entries.create(session, author=OWNER, date=f"2024-{1 + i % 12:02d}-{1 + i % 28:02d}",
                           title=f"Note {i} {WORDS[i % len(WORDS)]}", body=words, tags=[])
    app.extensions["db"].engine.dispose()
    return secrets


def server_env(data_dir: Path, port: int) -> dict[str, str]:
    return {**os.environ, "COMMONPLACE_DATA_DIR": str(data_dir),
            "COMMONPLACE_DATABASE_URL": f"sqlite:///{data_dir}/c.db",
            "COMMONPLACE_BIND": f"127.0.0.1:{port}", "COMMONPLACE_AUTH": "serve",
            "COMMONPLACE_OWNERS": OWNER, "COMMONPLACE_VIEWERS": VIEWER,
            "COMMONPLACE_SERVE_SOCKET": str(data_dir / "web.sock"),
            "COMMONPLACE_HOSTS": "notes.tail1234.ts.net", "COMMONPLACE_TIMEZONE": "UTC"}


def start(data_dir: Path, port: int) -> subprocess.Popen:
    with open(data_dir / "web.log", "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "app.cli", "web"], cwd=ROOT,
                                env=server_env(data_dir, port), stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        with contextlib.suppress(OSError):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/healthz")
            if conn.getresponse().status == 200:
                return proc
        time.sleep(0.2)
    stop_server(proc)
    raise RuntimeError(f"the server did not start; see {data_dir / 'web.log'}")
