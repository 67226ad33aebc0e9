"""What every browser test shares: Debian's chromium driven by Playwright (never
`playwright install`), a hard alarm so a stuck page fails instead of hanging CI, a page
that records console errors and page errors, and the phone/desktop screens."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import signal
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
DEVICES = {
    "phone": {"viewport": {"width": 375, "height": 812}, "is_mobile": True, "has_touch": True,
              "device_scale_factor": 2},
    "desktop": {"viewport": {"width": 1280, "height": 800}},
}

if CHROMIUM is None and os.environ.get("COMMONPLACE_REQUIRE_BROWSER"):
    # .ci/run installs chromium and sets this: there a missing browser is a failure.
    raise RuntimeError("COMMONPLACE_REQUIRE_BROWSER is set but chromium is not on the PATH")

# `pytestmark = BROWSER` in each browser test module.
BROWSER = [
    pytest.mark.browser,
    pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed "
                       "(apt-get install chromium); CI installs it"),
]


@contextlib.contextmanager
def hard_timeout(seconds: int):
    """Fail the test (instead of hanging CI) if anything in it blocks for too long."""

    def expire(_signum, _frame):
        raise TimeoutError(f"browser test took longer than {seconds}s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


_SHARED: dict = {}  # this test process's Playwright driver and Chromium


def _browser():
    """One Chromium per test process, launched by the first test that needs it. Starting
    Playwright's driver and Chromium cost ~1.3 CPU-s and ~1.3 s a test, 56 times; each
    test still gets a context of its own (cookies, storage, cache: nothing is shared)."""
    browser = _SHARED.get("browser")
    if browser is None or not browser.is_connected():
        from playwright.sync_api import sync_playwright

        if "playwright" not in _SHARED:
            _SHARED["playwright"] = sync_playwright().start()
            atexit.register(_close_shared)
        browser = _SHARED["browser"] = _SHARED["playwright"].chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS)
    return browser


def _close_shared() -> None:
    """Chromium and the driver, closed: at the process's exit, or after a test failed
    inside Playwright (an alarm may have cut a call short), so the next one starts clean."""
    browser, playwright = _SHARED.pop("browser", None), _SHARED.pop("playwright", None)
    for close in (browser and browser.close, playwright and playwright.stop):
        if close:
            with contextlib.suppress(Exception):
                close()


@contextlib.contextmanager
def browser_context(**options):
    """A fresh browser context, closed whatever happens."""
    context = _browser().new_context(**options)
    try:
        yield context
    except BaseException:
        _close_shared()
        raise
    else:
        context.close()


@contextlib.contextmanager
def chromium_page(device: str):
    """(page, problems): every console error or warning and page error lands in problems."""
    with browser_context(**DEVICES[device]) as context:
        page = context.new_page()
        page.set_default_timeout(15_000)
        problems: list[str] = []
        page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}")
                if m.type in ("error", "warning") else None)
        page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
        yield page, problems


def assert_fits(page) -> None:
    widths = page.evaluate(
        "[document.documentElement.scrollWidth, document.documentElement.clientWidth]")
    assert widths[0] <= widths[1], f"{page.url} scrolls sideways: {widths}"


def call(base: str, method: str, path: str, data: dict | None = None) -> dict:
    """The JSON API of the server under test (dev mode: loopback is the owner)."""
    request = urllib.request.Request(base + path, method=method,
                                     data=json.dumps(data).encode() if data else None,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=20) as response:
        return json.load(response)


ARTIFACTS = Path(os.environ.get("COMMONPLACE_TEST_ARTIFACTS", ROOT / "test-artifacts"))


def screenshot(page, name: str) -> Path:
    """Keep what the browser showed (test-artifacts/screenshots/<name>.png) for a person to
    look at; CI keeps the folder."""
    path = ARTIFACTS / "screenshots" / f"{name}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(path), full_page=True)
    return path
