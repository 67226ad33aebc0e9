"""Test stand-ins for the tailnet: a LocalAPI server on a temporary unix socket that answers
`whois` the way tailscaled does, the real web (`commonplace web`, gunicorn) on a free port
and on the unix socket `tailscale serve` proxies to, requests as serve sends them there,
and a network namespace of the test's own in which that web can see a non-loopback peer.

Everything here runs on this machine only: loopback, unix sockets, and 100.64.0.1 and
100.64.0.2 on the loopback device of a network namespace that exists only while its
server runs.
"""

from __future__ import annotations

import copy
import http.client
import json
import os
import shutil
import socket
import socketserver
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from tests.helpers import ROOT, free_port, stop_process, wait_for_http

DATA = Path(__file__).resolve().parent / "data"
LOCALAPI_HOST = "local-tailscaled.sock"
NETNS_ADDR = "100.64.0.1"  # CGNAT range, as tailnet addresses are; lives only in the netns
NETNS_PEER = "100.64.0.2"  # another "device", on the same namespace's loopback
SERVE_HOST = "notes.tail1234.ts.net"
SERVE_HEADERS_INFO = "https://tailscale.com/s/serve-headers"


def whois_sample(name: str, *, ip: str | None = None, login: str | None = None,
                 display: str | None = None) -> dict:
    """A recorded whois answer (tests/data/), optionally re-addressed or renamed."""
    doc = json.loads((DATA / f"tailscale_whois_{name}.json").read_text())
    doc = copy.deepcopy(doc)
    if ip is not None:
        doc["Node"]["Addresses"] = [f"{ip}/32"]
        doc["Node"]["AllowedIPs"] = [f"{ip}/32"]
    if login is not None:
        doc["UserProfile"]["LoginName"] = login
    if display is not None:
        doc["UserProfile"]["DisplayName"] = display
    return doc


def peer_ip(addr: str) -> str:
    """The IP of "ip:port", "[ipv6]:port", or a bare IP, as tailscaled parses addr."""
    if addr.startswith("["):
        return addr[1:addr.find("]")]
    if addr.count(":") == 1:
        return addr.split(":")[0]
    return addr


class FakeLocalAPI:
    """tailscaled's LocalAPI, as far as whois goes (ipn/localapi/localapi.go
    serveWhoIsWithBackend): 400 without addr, 404 "no match for IP:port" for an address
    that is not a peer, otherwise the WhoIsResponse as tab-indented JSON. Like tailscaled it
    refuses a request whose Host is not local-tailscaled.sock.

    `peers` maps an IP to its answer; `mode` makes it misbehave: "hang" (accept, never
    answer), "garbage" (200 with a body that is not JSON), "denied" (403)."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="cp-ts-")  # short: unix socket paths max ~107
        self.path = os.path.join(self.dir, "tailscaled.sock")
        self.peers: dict[str, dict] = {}
        self.mode = "ok"
        self.requests: list[str] = []  # the addr of every whois asked
        self.hosts: list[str] = []
        self._release = threading.Event()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_args):
                pass

            def _send(self, status: int, body: bytes, ctype: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _error(self, status: int, text: str) -> None:
                # Go's http.Error: text/plain, the message and a newline.
                self._send(status, (text + "\n").encode(), "text/plain; charset=utf-8")

            def do_GET(self):  # noqa: N802 (http.server's naming)
                fake.hosts.append(self.headers.get("Host", ""))
                if self.headers.get("Host") != LOCALAPI_HOST:
                    return self._error(403, "invalid localapi host")
                url = urlsplit(self.path)
                if url.path != "/localapi/v0/whois":
                    return self._error(404, "not found")
                addr = parse_qs(url.query).get("addr", [""])[0]
                fake.requests.append(addr)
                if fake.mode == "hang":
                    fake._release.wait(30)
                    return None
                if fake.mode == "denied":
                    return self._error(403, "whois access denied")
                if fake.mode == "garbage":
                    return self._send(200, b"<html>not json", "application/json")
                if not addr:
                    return self._error(400, "missing 'addr' parameter")
                ip = peer_ip(addr)
                if ip not in fake.peers:
                    return self._error(404, "no match for IP:port")
                body = json.dumps(fake.peers[ip], indent="\t").encode()
                return self._send(200, body, "application/json")

        class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
            daemon_threads = True

        self.server = Server(self.path, Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        """Stop answering; the socket file stays, as a crashed tailscaled's would."""
        self._release.set()
        self.server.shutdown()
        self.server.server_close()

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


# -- what tailscale serve sends to a unix socket --------------------------------------------


def as_serve_sends(login: str | None = None, name: str = "", *, peer: str = "100.101.102.103",
                   funnel: bool = False, host: str = SERVE_HOST) -> dict[str, str]:
    """The headers serve puts on a request it proxies to `unix:<path>`
    (ipn/ipnlocal/serve.go: reverseProxy.ServeHTTP, addProxyForwardedHeaders,
    addTailscaleIdentityHeaders): Host is "localhost" for a socket, the name the browser
    used is X-Forwarded-Host. `login` and `name` are the header values as serve sends them
    (already RFC 2047 encoded where serve would encode); None for no user identity (a
    tagged device, or this machine)."""
    headers = {"Host": "localhost", "X-Forwarded-Host": host, "X-Forwarded-Proto": "https",
               "X-Forwarded-For": peer}
    if funnel:
        headers["Tailscale-Funnel-Request"] = "?1"
    elif login is not None:
        headers.update({"Tailscale-User-Login": login, "Tailscale-User-Name": name,
                        "Tailscale-User-Profile-Pic": "",
                        "Tailscale-Headers-Info": SERVE_HEADERS_INFO})
    return headers


class UnixHTTPConnection(http.client.HTTPConnection):
    """HTTP over a unix socket, as serve's reverse proxy dials `unix:<path>`."""

    def __init__(self, path: str, timeout: float = 15):
        super().__init__("localhost", timeout=timeout)
        self.socket_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.socket_path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


def fetch_unix(socket_path: str, path: str, *, method: str = "GET", headers: dict | None = None,
               body: bytes | None = None) -> tuple[int, dict, bytes]:
    conn = UnixHTTPConnection(socket_path)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


# -- the real web ------------------------------------------------------------------------


def web_env(data_dir: Path, bind: str, **extra: str) -> dict[str, str]:
    env = {**os.environ, "COMMONPLACE_DATA_DIR": str(data_dir), "COMMONPLACE_BIND": bind,
           "COMMONPLACE_TIMEZONE": "UTC", **extra}
    env.pop("COMMONPLACE_DATABASE_URL", None)
    return env


def migrate(env: dict[str, str]) -> None:
    """What `commonplace db upgrade` does in the notebook `env` names (app.cli.migrate), in
    this process: the same migrations, without a Python that loads the CLI, Flask and
    Alembic again for every server a test starts."""
    from app import cli, create_app
    from app.config import from_environment

    app = create_app(from_environment(env))
    try:
        cli.migrate(app)
    finally:
        app.extensions["db"].engine.dispose()


class WebServer:
    """`commonplace web` (gunicorn with gunicorn.conf.py) on a free loopback port and, in
    serve mode, on a unix socket in a short temporary folder (`socket_path`)."""

    def __init__(self, data_dir: Path, **env: str):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self._socket_dir = tempfile.mkdtemp(prefix="cp-web-")  # short: sun_path is 108 bytes
        self.socket_path = os.path.join(self._socket_dir, "web.sock")
        self.env = web_env(data_dir, f"127.0.0.1:{self.port}",
                           COMMONPLACE_SERVE_SOCKET=self.socket_path, **env)
        migrate(self.env)
        self.log_path = data_dir / "web.log"
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen([sys.executable, "-m", "app.cli", "web"], cwd=ROOT,
                                     env=self.env, stdout=self._log, stderr=subprocess.STDOUT)
        try:
            wait_for_http(self.base + "/healthz", proc=self.proc)
        except BaseException:
            self.close()
            raise

    def via_serve(self, path: str, headers: dict, *, method: str = "GET",
                  body: bytes | None = None) -> tuple[int, dict, bytes]:
        """A request as `tailscale serve` makes it: over the unix socket."""
        return fetch_unix(self.socket_path, path, method=method, headers=headers, body=body)

    def close(self) -> None:
        stop_process(self.proc)
        self._log.close()
        shutil.rmtree(self._socket_dir, ignore_errors=True)


def fetch(url: str, *, method: str = "GET", headers: dict | None = None,
          body: bytes | None = None) -> tuple[int, dict, bytes]:
    request = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=15) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


# -- a network namespace of our own -------------------------------------------------------

CLIENT = """
import http.client, json, sys
host, port, source, path, method, headers, body = json.loads(sys.argv[1])
conn = http.client.HTTPConnection(host, port, timeout=15, source_address=(source, 0))
try:
    conn.request(method, path, body=body.encode() if body else None, headers=headers)
    r = conn.getresponse()
    out = (r.status, r.read().decode("utf-8", "replace"))
except OSError as e:
    out = (0, str(e))
print(json.dumps(out))
"""


def netns_available() -> bool:
    if not (shutil.which("unshare") and shutil.which("nsenter") and shutil.which("ip")):
        return False
    probe = subprocess.run(["unshare", "-n", "ip", "link", "set", "lo", "up"],
                           capture_output=True, timeout=10)
    return probe.returncode == 0


class NetnsWebServer:
    """`commonplace web --allow-non-loopback` bound to 100.64.0.1 inside a fresh network
    namespace (only its loopback device, carrying 100.64.0.1 and 100.64.0.2). A client in
    the same namespace connects from 100.64.0.2 (another device, as far as the web can
    tell) or from 100.64.0.1 (the node itself: what a proxy or forward on the node looks
    like), without a packet leaving this machine's own namespace."""

    def __init__(self, data_dir: Path, **env: str):
        self.port = 8000
        self.base = f"http://{NETNS_ADDR}:{self.port}"
        self.env = web_env(data_dir, f"{NETNS_ADDR}:{self.port}", **env)
        migrate(self.env)
        self._log = open(data_dir / "netns-web.log", "w")
        script = (f"ip link set lo up && ip addr add {NETNS_ADDR}/32 dev lo && "
                  f"ip addr add {NETNS_PEER}/32 dev lo && "
                  f"exec {sys.executable} -m app.cli web --allow-non-loopback")
        self.proc = subprocess.Popen(["unshare", "-n", "sh", "-c", script], cwd=ROOT,
                                     env=self.env, stdout=self._log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 30
            while self.request("/healthz", source=NETNS_ADDR)[0] != 200:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"netns web exited with {self.proc.returncode}")
                if time.monotonic() > deadline:
                    raise TimeoutError("netns web did not answer within 30s")
                time.sleep(0.3)
        except BaseException:
            self.close()
            raise

    def request(self, path: str, *, method: str = "GET", headers: dict | None = None,
                body: str | None = None, source: str = NETNS_PEER) -> tuple[int, str]:
        """One HTTP request from inside the namespace, from `source` (100.64.0.2, a peer,
        unless told otherwise)."""
        args = json.dumps([NETNS_ADDR, self.port, source, path, method, headers or {}, body])
        out = subprocess.run(["nsenter", f"--net=/proc/{self.proc.pid}/ns/net",
                              sys.executable, "-c", CLIENT, args],
                             capture_output=True, text=True, timeout=30)
        if out.returncode != 0:
            return 0, out.stderr
        status, text = json.loads(out.stdout)
        return status, text

    def close(self) -> None:
        stop_process(self.proc)
        self._log.close()


# -- "nothing changed" ---------------------------------------------------------------------


def notebook_state(db, data_dir: Path) -> str:
    """A fingerprint of everything a request could change: every row of every table, and
    the files of the markdown mirror and attachments. Equal before and after a refused
    request, or the refusal changed something."""
    import hashlib

    import sqlalchemy as sa

    from app.models import Base

    digest = hashlib.sha256()
    with db.read() as session:
        for table in Base.metadata.sorted_tables:
            columns = [c for c in table.columns if c.name != "last_used_at"]
            rows = session.execute(sa.select(*columns).order_by(*table.primary_key.columns))
            digest.update(table.name.encode())
            for row in rows:
                digest.update(repr(tuple(row)).encode())
    for folder in ("notes", "attachments"):
        for path in sorted((data_dir / folder).rglob("*")):
            if path.is_file():
                digest.update(str(path.relative_to(data_dir)).encode())
                digest.update(path.read_bytes())
    return digest.hexdigest()
