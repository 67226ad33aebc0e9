"""A feed reader's page shows the feed's card images: the real server (`commonplace up`) on
one loopback origin, a reader's page on another (a second port: another origin), which
embeds the image addresses the feed carries as feedparser reads them. Chromium loads the
card read with the feed token; a file the notebook keeps to itself (same-origin) stays
blocked on that page, so the test would see a policy that let nothing through."""

from __future__ import annotations

import re
import threading
import urllib.request
from html import escape
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import feedparser
import pytest

from app import create_app
from app.journal import posting
from tests.browser.harness import BROWSER, chromium_page, hard_timeout
from tests.helpers import add_token
from tests.real_runs import lab_output, store_run

pytestmark = BROWSER
TEST_SECONDS = 180  # the zero run (cached once per session) and a browser

LOADED = """() => [...document.images].every(i => i.complete)"""
DRAWN = """id => document.getElementById(id).naturalWidth"""


@pytest.fixture
def reader_origin():
    """A feed reader's page on a port of its own: set `page` to the HTML it serves."""
    served = {"page": ""}

    class Reader(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (the stdlib's name)
            body = served["page"].encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Reader)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield served, f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def test_a_feed_readers_page_on_another_origin_shows_the_card(live_server, data_dir,
                                                               tmp_path_factory,
                                                               reader_origin):
    app = create_app({"DATA_DIR": data_dir,
                      "DATABASE_URL": f"sqlite:///{data_dir}/commonplace.db"})
    db = app.extensions["db"]
    run_id = store_run(app, "zero", lab_output(tmp_path_factory, "zero"))
    assert posting.post_cards(db, "UTC") == [run_id]
    token = add_token(db, "reader", "feed")
    with urllib.request.urlopen(f"{live_server}/feed.atom?token={token}", timeout=20) as feed:
        parsed = feedparser.parse(feed.read())
    assert not parsed.bozo, parsed.get("bozo_exception")
    html = next(e.content[0].value for e in parsed.entries if f"/runs/{run_id}/" in
                e.content[0].value)
    card = re.search(r'<img [^>]*src="([^"]+)"', html)[1].replace("&amp;", "&")
    assert card.startswith(f"{live_server}/runs/{run_id}/card.svg?v=")
    served, origin = reader_origin
    assert not origin.startswith(live_server)
    served["page"] = (f'<!doctype html><title>Reader</title><img id="card" src="{escape(card)}"'
                      f' alt="card"><img id="own" src="{live_server}/static/icon.svg" alt="">')
    with hard_timeout(TEST_SECONDS), chromium_page("desktop") as (page, problems):
        page.goto(origin)
        page.wait_for_function(LOADED)
        assert page.evaluate(DRAWN, "card") > 0, problems
        assert page.evaluate(DRAWN, "own") == 0  # same-origin: blocked here, as it should be
        assert not [p for p in problems if "card.svg" in p], problems
