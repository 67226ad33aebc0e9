"""Installable on a phone: a web manifest served as one, PNG icons of the sizes it names
(drawn from app/static/icon.svg by tests/browser/make_icons.py), a theme colour, a
favicon, and a CSP that lets the browser fetch them."""

from __future__ import annotations

import re
import struct
from pathlib import Path
from urllib.parse import urlsplit

from tests.helpers import ROOT, Elements

STATIC = ROOT / "app" / "static"


def png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR", path
    return struct.unpack(">II", head[16:24])


def test_the_manifest_puts_the_notebook_on_a_home_screen(client):
    response = client.get("/manifest.webmanifest")
    assert response.status_code == 200
    assert response.mimetype == "application/manifest+json"
    manifest = response.get_json()
    assert manifest["start_url"] == "/" and manifest["scope"] == "/"
    assert manifest["display"] == "standalone"
    assert re.fullmatch(r"#[0-9a-f]{6}", manifest["theme_color"])
    assert re.fullmatch(r"#[0-9a-f]{6}", manifest["background_color"])
    sizes = {(icon["sizes"], icon["purpose"]) for icon in manifest["icons"]}
    assert {("192x192", "any"), ("512x512", "any"), ("512x512", "maskable")} <= sizes
    for icon in manifest["icons"]:
        path = urlsplit(icon["src"])
        assert path.query.startswith("v=")  # cache-busted like every asset
        assert client.get(icon["src"]).status_code == 200
        size = int(icon["sizes"].split("x")[0])
        assert png_size(STATIC / Path(path.path).name) == (size, size)


def test_every_page_links_the_manifest_icons_and_theme(client):
    page = client.get("/sitemap").text
    links = {attrs["rel"]: attrs for attrs, _ in Elements(page).all("link")
             if attrs.get("rel") in ("manifest", "apple-touch-icon")}
    assert links["manifest"]["href"] == "/manifest.webmanifest"
    assert png_size(STATIC / "apple-touch-icon.png") == (180, 180)
    assert client.get(links["apple-touch-icon"]["href"]).status_code == 200
    themes = [a for a, _ in Elements(page).all("meta") if a.get("name") == "theme-color"]
    assert {a["media"] for a in themes} == {"(prefers-color-scheme: light)",
                                            "(prefers-color-scheme: dark)"}


def test_favicon_and_the_csp_that_lets_them_load(client):
    favicon = client.get("/favicon.ico")
    assert favicon.status_code == 302
    assert client.get(favicon.location).mimetype == "image/png"
    assert png_size(STATIC / "icon-32.png") == (32, 32)
    csp = client.get("/").headers["Content-Security-Policy"]
    # manifest-src and img-src fall back to / are 'self': our own origin may serve them
    assert "default-src 'self'" in csp and "manifest-src" not in csp
    assert "img-src 'self' data:" in csp
