"""`commonplace publish --serve`: the built folder on loopback, to read before it goes
anywhere. Python's own static file server, bound to 127.0.0.1 on a port the system picks,
so nothing outside this machine can reach the preview."""

from __future__ import annotations

import functools
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format, *args) -> None:  # noqa: A002 (the base class's name)
        pass


def server(folder: Path, port: int = 0) -> ThreadingHTTPServer:
    handler = functools.partial(_Quiet, directory=str(folder))
    return ThreadingHTTPServer(("127.0.0.1", port), handler)


def serve(folder: Path, announce) -> None:
    """Serve until interrupted (Ctrl-C); `announce(url)` is told where."""
    with server(folder) as httpd:
        announce(f"http://127.0.0.1:{httpd.server_address[1]}/index.html")
        try:
            httpd.serve_forever()
        except KeyboardInterrupt:
            pass
