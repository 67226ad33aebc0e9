"""Static files at addresses that name their content (app/web/assets.py): every page links
them with ?v=<hash>, that address is cached for a year, any other is checked each time;
text files go out precompressed, from a cache kept in the data directory."""

from __future__ import annotations

import gzip
import hashlib
import re
from pathlib import Path

import brotli
import pytest

from app import ROOT

STATIC = ROOT / "app" / "static"


def version(name: str) -> str:
    return hashlib.sha256((STATIC / name).read_bytes()).hexdigest()[:10]


@pytest.mark.parametrize("page", ["/", "/calculator", "/entries/new", "/experiments"])
def test_pages_link_every_static_file_by_its_content_and_each_is_kept_a_year(client, page):
    html = client.get(page).get_data(as_text=True)
    links = set(re.findall(r'/static/([\w.-]+)\?v=([0-9a-f]+)', html))
    assert links
    for name, v in links:
        assert v == version(name), name
        response = client.get(f"/static/{name}?v={v}", headers={"Accept-Encoding": "br"})
        assert response.status_code == 200, name
        assert response.headers["Cache-Control"] == "public, max-age=31536000, immutable"


@pytest.mark.parametrize(("accept", "coding", "unpack"), [
    ("gzip, deflate, br", "br", brotli.decompress),
    ("gzip", "gzip", gzip.decompress),
    ("identity", None, lambda b: b),
])
def test_text_files_go_out_precompressed_and_cached(client, data_dir, accept, coding, unpack):
    v = version("app.css")
    response = client.get(f"/static/app.css?v={v}", headers={"Accept-Encoding": accept})
    assert response.status_code == 200
    assert response.headers.get("Content-Encoding") == coding
    assert response.headers["Vary"] == "Accept-Encoding"
    assert response.mimetype == "text/css"
    assert unpack(response.get_data()) == (STATIC / "app.css").read_bytes()
    tag = response.headers["ETag"]
    assert tag == f'"{v}{ {"br": "-br", "gzip": "-gz"}.get(coding, "") }"'
    held = client.get(f"/static/app.css?v={v}",
                      headers={"Accept-Encoding": accept, "If-None-Match": tag})
    assert held.status_code == 304 and held.get_data() == b""
    kept = list((Path(data_dir) / "cache" / "static").glob(f"{v}-app.css.*"))
    assert len(kept) == (1 if coding else 0)


def test_an_address_without_the_files_hash_is_checked_each_time(client):
    for query in ("", "?v=0123456789", "?v="):
        response = client.get(f"/static/app.js{query}")
        assert response.status_code == 200
        assert response.headers["Cache-Control"] == "public, no-cache"
        assert response.headers["ETag"] == f'"{version("app.js")}"'


def test_images_are_sent_as_they_are(client):
    v = version("icon-512.png")
    response = client.get(f"/static/icon-512.png?v={v}", headers={"Accept-Encoding": "br"})
    assert response.status_code == 200 and "Content-Encoding" not in response.headers
    assert response.get_data() == (STATIC / "icon-512.png").read_bytes()
    assert response.headers["Cache-Control"] == "public, max-age=31536000, immutable"


@pytest.mark.parametrize("path", ["/static/nothing.css", "/static/../__init__.py",
                                  "/static/%2e%2e/__init__.py", "/static/..%2f__init__.py"])
def test_nothing_outside_the_folder_is_served(client, path):
    assert client.get(path, headers={"Accept-Encoding": "br"}).status_code == 404


def test_the_code_stylesheet_is_linked_by_a_version_and_kept_a_year(client):
    html = client.get("/").get_data(as_text=True)
    linked = re.search(r'href="(/pygments\.css\?v=[0-9a-f]{10})"', html)[1]
    response = client.get(linked)
    assert response.status_code == 200 and ".highlight" in response.get_data(as_text=True)
    assert response.headers["Cache-Control"] == "public, max-age=31536000, immutable"
    assert client.get("/pygments.css").headers["Cache-Control"] == "public, no-cache"
