"""Where a request comes from: which of the web's doors it came in by, the TCP peer and
the local address, and whether a proxy stands between us and the client.

In serve mode the web listens twice (app.config.listen_addresses):
  - the unix socket COMMONPLACE_SERVE_SOCKET, which `tailscale serve` proxies to
    (`tailscale serve unix:<path>`). serve deletes the identity and forwarded headers a
    client sent and sets its own, so on this door they are believed, and ProxyFix reads
    X-Forwarded-For, -Proto and -Host (serve sends `Host: localhost` to a socket, and the
    name the browser asked for as X-Forwarded-Host);
  - the TCP address COMMONPLACE_BIND (127.0.0.1:8000), which runners, the CLI, health
    checks, every other process on the machine and any raw TCP forward (`serve --tcp`,
    `ssh -L`) reach. Nothing forwarded is believed there, identity headers least of all:
    only a bearer token names a caller.
A runner, and whatever it runs, shares the web's loopback in compose and in `commonplace
up`; it reaches the TCP door, not the socket, whose directory it is not given
(docs/SECURITY.md).
"""

from __future__ import annotations

import socket

from flask import Flask, request
from werkzeug.middleware.proxy_fix import ProxyFix

from app.port_holder import ip_of, is_loopback

SERVE_DOOR = "commonplace.serve_door"  # environ: True when the request came by serve's socket
# Headers only a proxy adds. serve sets X-Forwarded-* and Tailscale-*; other proxies use
# Forwarded, X-Real-Ip or Via. A client can add them too, but then it speaks as a proxy.
# As the WSGI environ names them (HTTP_ and the name upper-cased, "-" as "_"): the headers
# are read there, not through request.headers, whose iteration rebuilds every name in
# Python, on every request of dev mode.
PROXY_HEADER_PREFIXES = ("HTTP_X_FORWARDED_", "HTTP_TAILSCALE_")
PROXY_HEADERS = ("HTTP_FORWARDED", "HTTP_X_REAL_IP", "HTTP_VIA")


def same_ip(a: str | None, b: str | None) -> bool:
    x = ip_of(a)
    return x is not None and x == ip_of(b)


def came_by_serve_socket(environ: dict, socket_path: str, testing: bool) -> bool:
    sock = environ.get("gunicorn.socket")
    if sock is not None:
        try:
            return sock.family == socket.AF_UNIX and sock.getsockname() == socket_path
        except OSError:
            return False
    # No socket to look at: Flask's in-process test client, which has no listener. Under
    # TESTING it stands for serve's socket when it claims a loopback peer. Any other server
    # that does not say where it accepted a connection gets no door for identity headers.
    return testing and is_loopback(environ.get("REMOTE_ADDR"))


class ServeDoor:
    """WSGI middleware (serve mode): marks the requests that came by serve's socket and
    reads serve's forwarded headers on those only. serve is exactly one proxy and Sets
    X-Forwarded-For, -Proto and -Host (Go's ReverseProxy drops the client's copies)."""

    def __init__(self, app: Flask, wsgi_app, socket_path: str):
        self.app, self.wsgi_app, self.socket_path = app, wsgi_app, socket_path
        self.proxied = ProxyFix(wsgi_app, x_for=1, x_proto=1, x_host=1, x_port=0, x_prefix=0)

    def __call__(self, environ, start_response):
        by_serve = came_by_serve_socket(environ, self.socket_path, self.app.testing)
        environ[SERVE_DOOR] = by_serve
        return (self.proxied if by_serve else self.wsgi_app)(environ, start_response)


def by_serve_socket() -> bool:
    return bool(request.environ.get(SERVE_DOOR))


def peer_address(environ: dict | None = None) -> str:
    """The peer as the server saw it, before ProxyFix (serve's door) rewrote REMOTE_ADDR
    from X-Forwarded-For. "" for a unix socket. (`environ`: the request's, if the caller
    has it at hand.)"""
    environ = request.environ if environ is None else environ
    original = environ.get("werkzeug.proxy_fix.orig", {})
    return original.get("REMOTE_ADDR") or environ.get("REMOTE_ADDR") or ""


def local_address() -> str | None:
    """This end of the connection: the address the client connected to (our own tailnet
    address, in whois mode). None when the server does not say."""
    sock = request.environ.get("gunicorn.socket")
    if sock is not None:
        try:
            name = sock.getsockname()
        except OSError:
            return None
        return name[0] if isinstance(name, tuple) else None
    server = request.environ.get("SERVER_NAME", "")
    return server if ip_of(server) is not None else None


def came_through_proxy(environ: dict | None = None) -> bool:
    """Whether the request carries headers that only a proxy adds."""
    environ = request.environ if environ is None else environ
    return any(key in PROXY_HEADERS or key.startswith(PROXY_HEADER_PREFIXES)
               for key in environ if key.startswith("HTTP_"))
