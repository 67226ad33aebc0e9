"""Text responses as light as the link they cross: compressed, and named by their content so
that a browser holding one is told "not modified" rather than sent it again.

A phone on a relayed tailnet link pays for every byte and every round trip, and pages are
repeated markup that compresses many times over (docs/PERFORMANCE.md, *Over the wire*).
An after_request hook, for every view's answer, errors included:

- an ETag, strong, on a 200 to a GET that sets none: a digest of the body *and of who
  asked*, so one reader's tag never matches another's page; with `private, no-cache`
  where the view set no Cache-Control (a browser keeps the page but asks each time; no
  shared cache keeps a page that is one reader's);
- brotli, else gzip, by the request's Accept-Encoding and its q-values, for a text body
  above a few packets' worth; each encoding is a representation of its own, its ETag the
  identity's with the coding added (a strong tag names exactly one sequence of bytes);
- If-None-Match answered with 304 before anything is compressed.

Streamed answers (a generator, a file sent by send_file: static files have precompressed
copies of their own, app/web/assets.py) pass as they are, as do bodies already encoded.
"""

from __future__ import annotations

import hashlib
import threading
import zlib
from collections import OrderedDict

from flask import Flask, Request, Response, current_app, g, request

try:  # brotli is a dependency; a platform without its wheel still gets gzip
    import brotli
except ImportError:  # pragma: no cover - the wheel is installed everywhere we test
    brotli = None

MIN_SIZE = 1024  # below about a packet, the encoding's header and the CPU win nothing
# Work per request: brotli at quality 5 costs about what gzip at 6 does and is smaller;
# its top qualities are for files compressed once (app/web/assets.py).
BROTLI_QUALITY, GZIP_LEVEL = 5, 6
TEXT_TYPES = frozenset({
    "application/json", "application/javascript", "application/xml",
    "application/atom+xml", "application/manifest+json", "image/svg+xml",
})
CODINGS = ("br", "gzip") if brotli is not None else ("gzip",)
SUFFIX = {"br": "-br", "gzip": "-gz"}
KEPT = 64  # compressed bodies per process, by ETag: a kept page is compressed once


def compressible(mimetype: str) -> bool:
    return mimetype.startswith("text/") or mimetype in TEXT_TYPES or mimetype.endswith(
        ("+json", "+xml"))


def chosen_coding(req: Request) -> str | None:
    """The encoding the request prefers among ours (brotli on a tie), or None for identity.
    `q=0` refuses a coding; `*` stands for any coding it does not name."""
    accepted = req.accept_encodings
    best, best_q = None, 0.0
    for coding in CODINGS:
        q = accepted.quality(coding)
        if q > best_q:
            best, best_q = coding, q
    return best


def compress(body: bytes, coding: str, *, best: bool = False) -> bytes:
    if coding == "br":
        return brotli.compress(body, quality=11 if best else BROTLI_QUALITY)
    packer = zlib.compressobj(9 if best else GZIP_LEVEL, zlib.DEFLATED, 31)  # gzip, mtime 0
    return packer.compress(body) + packer.flush()


class Kept:
    """The last bodies compressed, by their strong ETag (which names the bytes): a page kept
    whole (app/web/pages/kept.py) and viewed again is not compressed again."""

    def __init__(self, size: int = KEPT):
        self.size, self.bodies, self.lock = size, OrderedDict(), threading.Lock()

    def get(self, tag: str) -> bytes | None:
        return self.bodies.get(tag)

    def put(self, tag: str, body: bytes) -> None:
        with self.lock:
            self.bodies[tag] = body
            if len(self.bodies) > self.size:
                self.bodies.popitem(last=False)


def _reader() -> bytes:
    """Who the body was made for, length-prefixed so no reader's name runs into the body."""
    identity = g.get("identity")
    who = f"{identity.login}\0{identity.role}".encode() if identity else b""
    return len(who).to_bytes(4, "big") + who


def _strong(tag: str | None) -> str | None:
    return None if tag is None or tag.startswith("W/") else tag.strip('"')


def finish(response: Response) -> Response:
    req = request._get_current_object()
    if (req.method not in ("GET", "HEAD") or response.is_streamed
            or response.direct_passthrough or "Content-Encoding" in response.headers):
        return response
    body = response.get_data()
    tag = _strong(response.headers.get("ETag"))
    cache_control = response.headers.get("Cache-Control", "")
    if tag is None and response.status_code == 200 and "no-store" not in cache_control:
        digest = hashlib.blake2b(_reader(), digest_size=16)
        digest.update(body)
        tag = digest.hexdigest()
        if not cache_control:
            response.headers["Cache-Control"] = "private, no-cache"
    coding = None
    if len(body) >= MIN_SIZE and compressible(response.mimetype or ""):
        response.vary.add("Accept-Encoding")
        coding = chosen_coding(req)
    if tag is not None:
        tag = tag + (SUFFIX[coding] if coding else "")
        response.set_etag(tag)
        if response.status_code == 200 and tag in req.if_none_match:
            response.status_code = 304
            response.set_data(b"")
            del response.headers["Content-Length"]
            return response
    if coding:
        kept = current_app.extensions["compressed"]
        packed = kept.get(tag) if tag else None
        if packed is None:
            packed = compress(body, coding)
            if tag:
                kept.put(tag, packed)
        response.set_data(packed)
        response.headers["Content-Encoding"] = coding
    return response


def init_app(app: Flask) -> None:
    app.extensions["compressed"] = Kept()
    app.after_request(finish)
