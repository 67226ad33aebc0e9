"""Static files (app/static/) at addresses that name their content, kept by browsers for a
year, and sent precompressed.

A page links each file as `/static/<name>?v=<hash>` (asset_url), the hash the first ten hex
digits of the file's SHA-256: a changed file is a new address, so the old one may be
cached for good. A request whose `v` is the file's hash gets `public, max-age=31536000,
immutable` (the files are the same for every reader, and open to all: no identity rides on
them); any other `v`, or none, gets `no-cache` and an ETag, so an old link still works
and is never kept. docs/ARCHITECTURE.md, *Addresses that name their content*, is the
scheme as a cache (a service worker's, say) may rely on.

Each text file is compressed once at its best (brotli at quality 11, gzip at 9), on the
first request that asks for that encoding, and kept under <data>/cache/static/ by its hash:
later requests, from any worker and after a restart, send those bytes as they are.
"""

from __future__ import annotations

import functools
import hashlib
import mimetypes
import os
from importlib import metadata
from pathlib import Path

from flask import Flask, abort, current_app, request, send_file
from werkzeug.security import safe_join

from app.notebook import render
from app.web.compression import MIN_SIZE, SUFFIX, chosen_coding, compress, compressible
from base.durable import write_atomic

FOREVER = "public, max-age=31536000, immutable"
CHECK = "public, no-cache"
EXTENSION = {"br": "br", "gzip": "gz"}


@functools.cache
def _fingerprint(path: str, mtime_ns: int, size: int) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:10]


def fingerprint(path: Path) -> str:
    """The file's content hash, worked out again only when the file changes."""
    found = path.stat()
    return _fingerprint(str(path), found.st_mtime_ns, found.st_size)


def asset_version(app: Flask, name: str) -> str:
    return fingerprint(Path(app.static_folder or "") / name)


@functools.cache
def code_stylesheet_version() -> str:
    """A hash naming the code blocks' stylesheet (Pygments', made, not a file), linked and
    cached as the static files are. Every page links it, and a worker that only reads never
    imports Pygments, so the hash is of what makes the stylesheet (Pygments' version and
    the module that picks its styles), not of the stylesheet itself."""
    maker = Path(render.__file__).with_name("highlight.py").read_bytes()
    return hashlib.sha256(metadata.version("pygments").encode() + maker).hexdigest()[:10]


def cache_control(digest: str) -> str:
    return FOREVER if request.args.get("v") == digest else CHECK


def _compressed(source: Path, digest: str, coding: str) -> Path:
    """The file's bytes in `coding`, written once under the data directory's cache."""
    cache = Path(current_app.config["DATA_DIR"]) / "cache" / "static"
    kept = cache / f"{digest}-{source.name}.{EXTENSION[coding]}"
    if not kept.exists():
        cache.mkdir(parents=True, exist_ok=True)
        write_atomic(kept, compress(source.read_bytes(), coding, best=True))
    return kept


def serve(filename: str):
    """Flask's `static` endpoint, in place of its own send_static_file."""
    joined = safe_join(current_app.static_folder or "", filename)
    if joined is None or not os.path.isfile(joined):
        abort(404)
    source = Path(joined)
    digest = fingerprint(source)
    mimetype = mimetypes.guess_type(source.name)[0] or "application/octet-stream"
    coding = None
    text = compressible(mimetype) and source.stat().st_size >= MIN_SIZE
    if text:
        coding = chosen_coding(request)
    sent = _compressed(source, digest, coding) if coding else source
    response = send_file(sent, mimetype=mimetype, conditional=True,
                         etag=digest + (SUFFIX[coding] if coding else ""),
                         last_modified=source.stat().st_mtime)
    if coding:
        response.headers["Content-Encoding"] = coding
    if text:
        response.vary.add("Accept-Encoding")
    response.headers["Cache-Control"] = cache_control(digest)
    return response


def init_app(app: Flask) -> None:
    if "static" in app.view_functions:
        app.view_functions["static"] = serve
