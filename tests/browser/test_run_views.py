"""The run page's measured timeline in real Chromium, on a real finished pipeline run (the
CPU lab) served by the real server (`commonplace up`): at phone and desktop size the page
does not scroll sideways and raises no console error or CSP refusal, tapping a block
shows its details, zoom rewrites the chart, and the trace link downloads a trace."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.browser.harness import (
    BROWSER,
    assert_fits,
    chromium_page,
    hard_timeout,
    screenshot,
)
from tests.real_runs import lab_output, store_run

pytestmark = BROWSER
TEST_SECONDS = 120


@pytest.fixture
def run_url(make_app, live_server, tmp_path_factory) -> str:
    app = make_app()  # the live server's data directory and database
    run_id = store_run(app, "pipeline", lab_output(tmp_path_factory, "pipeline"))
    return f"{live_server}/runs/{run_id}?tl_strategy=gpipe"


def tap_and_zoom(page) -> None:
    block = page.locator("svg.tl-chart rect.tl-block.tl-forward").first
    block.click()
    details = page.locator(".tl-details")
    assert "forward" in details.inner_text() and "micro-batch" in details.inner_text()
    assert "tl-sel" in (block.get_attribute("class") or "")

    before = block.get_attribute("x")
    page.get_by_role("button", name="Zoom in").click()
    page.get_by_role("button", name="Zoom in").click()
    assert "×" in page.locator(".tl-zoom-level").inner_text()
    assert block.get_attribute("x") != before
    page.get_by_role("button", name="Whole step").click()
    assert block.get_attribute("x") == before
    assert page.locator(".tl-zoom-level").inner_text() == ""

    page.locator("svg.tl-chart rect.tl-block.tl-backward").first.focus()  # keyboard reaches blocks
    assert "backward" in details.inner_text()


def test_the_timeline_on_a_phone_and_a_desktop(run_url):
    """One server for both screens (starting one takes longer than the checks)."""
    with hard_timeout(TEST_SECONDS), chromium_page("phone") as (page, problems):
        page.goto(run_url + "#timeline")
        assert page.locator("svg.tl-chart").is_visible()
        assert_fits(page)
        size = page.eval_on_selector("svg.tl-chart text.tl-rank",
                                     "el => getComputedStyle(el).fontSize")
        assert float(size.rstrip("px")) >= 12
        tap_and_zoom(page)
        assert_fits(page)
        page.get_by_role("navigation", name="Timed step").get_by_role("link").first.click()
        page.wait_for_url("**tl_step=**")
        assert page.locator("svg.tl-chart").is_visible()
        screenshot(page, "timeline-phone")
        assert problems == []

    with hard_timeout(TEST_SECONDS), chromium_page("desktop") as (page, problems):
        page.goto(run_url)
        assert_fits(page)
        tap_and_zoom(page)
        assert page.locator("svg.tl-heat").count() >= 3
        with page.expect_download() as info:
            page.get_by_role("link", name="Download trace.json").click()
        body = json.loads(Path(info.value.path()).read_text())
        assert body["displayTimeUnit"] == "ms" and body["traceEvents"]
        assert {e["pid"] for e in body["traceEvents"] if e["ph"] == "X"} == {0, 1}
        screenshot(page, "timeline-desktop")
        assert problems == []
