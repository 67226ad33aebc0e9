"""The published site in a real browser, served as a static host would serve it (the
preview's server, on loopback): it reads on a phone without sideways scrolling, with
no console error; the card's chart image loads; search finds public entries and
nothing else; and with JavaScript off every page still reads."""

from __future__ import annotations

import threading

import pytest

from app.publishing import preview
from app.publishing.command import publish
from tests.app.publishing.test_publish import BASE, notebook  # noqa: F401 (the notebook fixture)
from tests.browser.harness import (
    BROWSER,
    DEVICES,
    assert_fits,
    browser_context,
    chromium_page,
    hard_timeout,
)

pytestmark = BROWSER


@pytest.fixture
def site(notebook, tmp_path):  # noqa: F811 (the fixture imported above)
    app, _ = notebook
    publish(app, tmp_path / "site", BASE, "Working Notes", serve=False)
    with preview.server(tmp_path / "site") as httpd:
        thread = threading.Thread(target=httpd.serve_forever, daemon=True)
        thread.start()
        yield f"http://127.0.0.1:{httpd.server_address[1]}/"
        httpd.shutdown()
        thread.join(timeout=10)


def test_the_site_reads_and_searches_on_a_phone(site):
    with hard_timeout(120), chromium_page("phone") as (page, problems):
        page.goto(site + "index.html")
        assert_fits(page)
        page.click("nav >> text=Search")
        page.fill("#q", "bubbles")
        page.wait_for_selector("#search-results li a")
        assert page.inner_text("#search-results").startswith("Pipeline bubbles")
        page.click("#search-results a")
        assert page.inner_text("h1") == "Pipeline bubbles"
        page.goto(site + "weeks/2024-W13.html")
        assert_fits(page)
        assert page.evaluate("document.querySelector('.card-image img').naturalWidth") > 0
        page.goto(site + "search.html?q=zanzibar")
        page.wait_for_function("() => document.getElementById('search-status').textContent"
                               " === '0 entries'")
        assert problems == []


def test_every_page_reads_without_javascript(site):
    with hard_timeout(120), browser_context(java_script_enabled=False,
                                            **DEVICES["phone"]) as context:
        page = context.new_page()
        page.goto(site + "weeks/2024-W13.html")
        assert "ddp took 20 ms" in page.inner_text("main")
        page.goto(site + "search.html")
        assert "Site Map" in page.inner_text("#search-status")
