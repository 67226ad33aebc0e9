"""The installed app without the tailnet, in Chromium against the real server (`commonplace
up` on loopback, which Chromium counts as a secure context, so the service worker
registers over plain http): the letter and recent entries open offline; a capture made
offline reaches the server once online; an offline edit that overlaps a save made
meanwhile reaches the merge view, losing neither text; Forget empties the cache."""

from __future__ import annotations

import datetime as dt
import json
import time
import urllib.request

import pytest

from tests.browser.harness import (
    BROWSER,
    DEVICES,
    browser_context,
    call,
    hard_timeout,
    screenshot,
)
from tests.helpers import commonplace_up

pytestmark = BROWSER
TEST_SECONDS = 150
WAIT_MS = 30_000


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """One `commonplace up` for the module: the tests share it, each in a fresh browser."""
    with commonplace_up(tmp_path_factory.mktemp("offline")) as base:
        yield base


def this_weeks_letter(base: str) -> dict:
    week = dt.datetime.now(dt.UTC).date().isocalendar()
    with urllib.request.urlopen(f"{base}/api/v1/weeks/{week[0]}-W{week[1]:02d}",
                                timeout=20) as response:
        return json.load(response)["letter"]


def installed(context, base: str, problems: list[str]):
    """A page of the app with its service worker active and the offline set kept."""
    page = context.new_page()
    page.set_default_timeout(15_000)
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.goto(base + "/")
    page.wait_for_selector("html[data-offline-ready=kept]", state="attached", timeout=WAIT_MS)
    assert page.evaluate("navigator.serviceWorker.ready.then(r => r.active.state)") == "activated"
    assert page.evaluate("navigator.serviceWorker.controller !== null")
    return page


def found(base: str, words: str) -> list[dict]:
    with urllib.request.urlopen(f"{base}/api/v1/entries?q=%22{urllib.parse.quote(words)}%22",
                                timeout=20) as response:
        return json.load(response)["entries"]


def wait_until(check, what: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {seconds}s: {what}")
        time.sleep(0.25)


KEPT_COUNT = """(async () => {
  let n = 0;
  for (const name of await caches.keys()) n += (await (await caches.open(name)).keys()).length;
  return n;
})()"""


HELLO = """login => navigator.serviceWorker.ready.then(r => new Promise(done => {
  const channel = new MessageChannel();
  channel.port1.onmessage = event => done(event.data);
  r.active.postMessage({type: "hello", login, online: false, url: location.href},
                       [channel.port2]);
}))"""


def test_read_offline_capture_offline_forget_the_copy_then_send(server):
    letter = this_weeks_letter(server)
    entry = call(server, "POST", "/api/v1/entries",
                 {"title": "Read on the train", "body": "Pipeline bubbles, kept offline."})
    with hard_timeout(TEST_SECONDS), browser_context(**DEVICES["phone"]) as context:
        problems: list[str] = []
        page = installed(context, server, problems)
        context.set_offline(True)

        page.goto(server + letter["url"])
        assert letter["title"] in page.inner_text("main")
        assert "Offline." in page.inner_text("#offline-banner")
        screenshot(page, "offline-letter")
        page.goto(server + entry["url"])
        assert "Pipeline bubbles, kept offline." in page.inner_text("main")
        page.goto(server + "/entries/999999/never-kept")  # not kept: the offline page
        assert "Not kept on this device" in page.inner_text("main")
        page.wait_for_selector(f"#offline-kept a[href='{server}{entry['url']}']")

        page.goto(server + "/")
        page.fill("#capture-title", "Captured in a tunnel")
        page.fill("#capture-body", "Written with no signal.")
        page.click(".capture button[type=submit]")
        page.wait_for_selector(".pending-count")
        assert "1 write waiting to be sent" in page.inner_text("#offline-banner")
        assert found(server, "Written with no signal") == []
        screenshot(page, "offline-capture-kept")

        # Forget (the device's "log out"): the copy goes, the words waiting to be sent stay.
        assert page.evaluate(KEPT_COUNT) > 0
        page.click("#offline-copy button")
        page.wait_for_selector("html[data-offline-ready=none]", state="attached")
        assert page.evaluate(KEPT_COUNT) == 0
        assert "1 write waiting to be sent" in page.inner_text("#offline-banner")

        context.set_offline(False)
        wait_until(lambda: found(server, "Written with no signal"), "the capture on the server")
        page.wait_for_selector(".pending-count", state="detached")
        made = found(server, "Written with no signal")
        assert len(made) == 1 and made[0]["title"] == "Captured in a tunnel"
        assert problems == []


def test_an_offline_edit_over_a_newer_save_reaches_the_merge_view(server):
    letter = this_weeks_letter(server)
    body = letter["body"].replace("## Notes", "## Notes\n\nThe bubble is ?", 1)
    letter = call(server, "PUT", f"/api/v1/entries/{letter['id']}",
                  {"body": body, "base_revision": letter["revision"]})
    phone, laptop = "Phone: the bubble is 1/m.", "Laptop: the bubble is (p-1)/(m+p-1)."
    with hard_timeout(TEST_SECONDS), browser_context(**DEVICES["phone"]) as context:
        problems: list[str] = []
        page = installed(context, server, problems)
        context.set_offline(True)
        page.goto(f"{server}/entries/{letter['id']}/edit")  # the form, as kept
        page.fill("#f-body", page.input_value("#f-body").replace("The bubble is ?", phone))
        page.click("form.editor button.primary[type=submit]")
        page.wait_for_selector(".pending-count")

        # Another login opens the app on this device: the copy was the previous one's and
        # goes; the edit is kept as its author's, not shown as the other's.
        seen = page.evaluate(HELLO, "someone-else@example.com")
        assert seen["pending"] == [] and seen["others"] == 1
        assert page.evaluate(KEPT_COUNT) == 0

        # Meanwhile the laptop saves the same line on the server.
        call(server, "PUT", f"/api/v1/entries/{letter['id']}",
             {"body": body.replace("The bubble is ?", laptop),
              "base_revision": letter["revision"]})
        context.set_offline(False)  # the server says who this is: the edit's author, sent
        page.wait_for_selector(".pending-conflict button")
        screenshot(page, "offline-edit-conflict")
        page.click(".pending-conflict button")  # sent, refused as a conflict: merge it
        page.wait_for_selector(".merge-place")
        offered = page.input_value("#f-body")
        assert phone in offered and laptop in offered
        page.click("form.editor button.primary[type=submit]")  # saved as offered
        page.wait_for_selector("article.letter")
        # a function, not an expression: Playwright polls an expression through eval, which
        # the page's CSP refuses
        page.wait_for_function("() => document.getElementById('offline-copy') && "
                               "!document.querySelector('.pending-list li')")
        assert problems == []
    saved = this_weeks_letter(server)["body"]
    assert phone in saved and laptop in saved
