"""The real server: `commonplace up` runs migrations and gunicorn on a free loopback port."""

import json
import urllib.error
import urllib.request

from app.notebook.isoweeks import iso_week, today


def fetch(url, data=None, method=None, headers=None):
    body = json.dumps(data).encode() if data is not None else None
    request = urllib.request.Request(url, data=body, method=method, headers={
        "Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, exc.read()


def test_gunicorn_serves_pages_api_and_feed(live_server, data_dir):
    status, headers, body = fetch(live_server + "/healthz")
    assert status == 200 and json.loads(body) == {"status": "ok"}
    # `up` made this week's letter and the database in the data directory
    week = iso_week(today("UTC"))
    status, _, body = fetch(f"{live_server}/api/v1/weeks/{week}")
    assert status == 200 and json.loads(body)["letter"]["kind"] == "week"
    assert (data_dir / "commonplace.db").exists()
    status, _, body = fetch(live_server + "/api/v1/entries", {"title": "Over the wire",
                                                              "body": "served by gunicorn"})
    assert status == 201
    created = json.loads(body)
    for path in ("/", created["url"], f"/weeks/{week}", "/sitemap", "/search?q=gunicorn",
                 "/feed.atom"):
        status, headers, body = fetch(live_server + path)
        assert status == 200, path
        assert "script-src 'self'" in headers["Content-Security-Policy"]
    status, _, body = fetch(live_server + "/search?q=gunicorn")
    assert b"Over the wire" in body
    status, _, body = fetch(live_server + "/feed.atom")
    assert b"Over the wire" in body
    assert (data_dir / "notes").rglob("*-over-the-wire.md")
    status, _, body = fetch(live_server + "/api/v1/entries", {"title": ""})
    assert status == 422


def test_concurrent_writers_all_land(live_server):
    """Two gunicorn workers with four threads each, one SQLite writer at a time: every
    acknowledged save is there afterwards (bounded: 40 requests over 8 threads)."""
    from concurrent.futures import ThreadPoolExecutor

    def create(i):
        return fetch(live_server + "/api/v1/entries", {"title": f"Note {i}", "body": "x"})[0]

    with ThreadPoolExecutor(max_workers=8) as pool:
        statuses = list(pool.map(create, range(40)))
    assert statuses == [201] * 40
    status, _, body = fetch(live_server + "/api/v1/entries?limit=100&kind=entry")
    assert len(json.loads(body)["entries"]) == 40
