"""Writing an entry in a real browser (Debian's chromium through Playwright) against the
real server (`commonplace up`, gunicorn), at phone size and at desktop size.

The entry must render, and show on Home, in this week's letter page, in search, in the
Atom feed and as a markdown file in the data folder; the pages must fit a 375 px screen and
the browser must report no console errors and no CSP violations.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import struct
import urllib.request
import zlib

import pytest

from app.notebook import isoweeks
from tests.browser.harness import BROWSER, assert_fits, chromium_page, hard_timeout

pytestmark = BROWSER
TEST_SECONDS = 150  # a hard limit for one test, browser start included


def post_json(url: str, data: dict) -> dict:
    request = urllib.request.Request(url, data=json.dumps(data).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.load(response)


def tiny_png() -> bytes:
    def chunk(kind: bytes, body: bytes) -> bytes:
        return (struct.pack(">I", len(body)) + kind + body
                + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    pixels = zlib.compress(b"\x00\x1f\x6a\x63")
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels)
            + chunk(b"IEND", b""))


def assert_fits_phone(page, device: str) -> None:
    if device == "phone":
        assert_fits(page)


@pytest.fixture(scope="module")
def live_server(module_server) -> str:
    """One server for the module: each test writes entries of its own (titles and words
    with its device's name) and reads no other test's."""
    return module_server[0]


@pytest.mark.parametrize("device", ["phone", "desktop"])
def test_write_an_entry_in_the_browser(module_server, device, tmp_path):
    live_server, data_dir = module_server
    word = f"quokka{device}"  # one word that only this entry contains
    title = f"Field notes from the {device}"
    target = post_json(f"{live_server}/api/v1/entries",
                       {"title": f"Ring notes {device}", "body": "All-reduce in a ring."})
    this_week = isoweeks.iso_week(dt.datetime.now(dt.UTC).date())  # the server runs in UTC
    image = tmp_path / "dot.png"
    image.write_bytes(tiny_png())

    with hard_timeout(TEST_SECONDS), chromium_page(device) as (page, problems):
        page.goto(live_server + "/")
        assert page.locator("h1").first.inner_text() == f"Week {this_week}"
        assert_fits_phone(page, device)

        # A new entry: the "n" shortcut on a keyboard, the New button on a phone.
        if device == "desktop":
            page.keyboard.press("n")
        else:
            page.get_by_role("link", name="New", exact=True).tap()
        page.wait_for_url(re.compile(r"/entries/new"))
        assert_fits_phone(page, device)
        page.fill("#f-title", title)
        page.fill("#f-tags", "fieldwork, browser")
        body = (f"Measured the {word} today, see [[Ring notes {device}]].\n\n"
                "## Numbers\n\n| n | ms |\n|---|---|\n| 2 | 10 |\n\n## Next\n\nMore.")
        page.fill("#f-body", body)

        page.get_by_role("button", name="Preview").click()
        page.locator("#preview a.wikilink").wait_for()
        assert page.locator("#preview h2").first.inner_text().startswith("Numbers")
        page.get_by_role("button", name="Write").click()

        page.focus("#f-body")
        page.keyboard.press("Control+Enter")
        page.wait_for_url(re.compile(r"/entries/\d+/field-notes-from-the-"))
        entry_url = page.url
        assert page.locator("h1").inner_text() == title
        link = page.locator(".prose a.wikilink")
        assert link.get_attribute("href") == target["url"]
        assert page.locator(".tags a.tag").all_inner_texts() == ["#fieldwork", "#browser"]
        assert page.locator(".prose table td").first.inner_text() == "2"
        assert_fits_phone(page, device)

        # Edit: attach an image from the file picker, then save (a tap on a phone).
        page.get_by_role("link", name="Edit", exact=True).click()
        page.wait_for_url(re.compile(r"/edit$"))
        page.set_input_files("#f-file", str(image))
        from playwright.sync_api import expect

        # An assertion that polls from Python: no page-side eval, which the CSP forbids.
        expect(page.locator("#f-body")).to_have_value(re.compile("/attachments/"),
                                                       timeout=20_000)
        if device == "phone":
            page.get_by_role("button", name="Save", exact=True).tap()
        else:
            page.focus("#f-title")
            page.keyboard.press("Control+Enter")
        page.wait_for_url(entry_url)
        img = page.locator(".prose img")
        assert img.evaluate("i => i.complete && i.naturalWidth") == 1

        # It shows everywhere it should.
        page.goto(live_server + "/")
        assert title in page.locator(".recent").inner_text()
        page.locator("header.site").get_by_role("link", name="This week").click()
        page.wait_for_url(re.compile(rf"/weeks/{this_week}$"))
        assert title in page.locator(".week-entries").inner_text()
        assert_fits_phone(page, device)

        page.fill("#site-search", word)
        page.keyboard.press("Enter")
        page.wait_for_url(re.compile(r"/search\?q="))
        assert page.locator(".hits li").count() == 1
        assert page.locator(".hits mark").first.inner_text().lower() == word
        assert_fits_phone(page, device)

        entry_id = re.search(r"/entries/(\d+)/", entry_url)[1]
        for path in ("/sitemap", "/tags/fieldwork", f"/entries/{entry_id}/history"):
            page.goto(live_server + path)
            assert_fits_phone(page, device)

        feed = page.request.get(live_server + "/feed.atom")
        assert feed.ok and title in feed.text()

        assert problems == []

    files = list((data_dir / "notes").rglob(f"*-field-notes-from-the-{device}.md"))
    assert len(files) == 1
    text = files[0].read_text()
    assert f"title: {title}" in text and word in text and "/attachments/" in text


def test_the_listener_would_see_a_csp_violation(live_server):
    """The check above is only worth something if a blocked inline script is reported."""
    with hard_timeout(60), chromium_page("desktop") as (page, problems):
        page.goto(live_server + "/sitemap")
        assert problems == []
        page.evaluate("""() => {
            const s = document.createElement('script');
            s.textContent = 'window.ran = true';
            document.body.appendChild(s);
        }""")
        page.wait_for_timeout(200)
        assert page.evaluate("window.ran === undefined")
        assert any("Content Security Policy" in p for p in problems), problems
