"""Every kind of page, at phone size (375 px) in Chromium against the real server
(`commonplace up`): none scrolls sideways, none logs a console error or a CSP violation,
light and dark. The notebook and the journal are filled through the API first, with runs
that ask for eight GPUs so that `up`'s local CPU runner leaves them queued."""

from __future__ import annotations

import re

from app.notebook import isoweeks
from tests.browser.harness import BROWSER, assert_fits, call, chromium_page, hard_timeout

pytestmark = BROWSER
TEST_SECONDS = 240  # a hard limit, browser start included: ~25 pages, twice
GPU_RUN = {"device": "cuda", "world_size": 8, "batch_size": 8}  # no CPU runner takes it




def fill(base: str) -> dict[str, str]:
    """Something of every kind, and the path of each page kind."""
    week = isoweeks.iso_week(isoweeks.today("UTC"))
    ring = call(base, "POST", "/api/v1/entries", {
        "title": "Ring all-reduce with a rather long title that must wrap on a phone",
        "tags": ["ddp", "comm"],
        "body": "Measured `bucket_cap_mb=5` today. #ddp\n\n- [ ] rerun on GPU\n- [x] write up\n\n"
                "| op | size | time | bandwidth | bus bandwidth |\n|---|---|---|---|---|\n"
                "| all_reduce | 1048576 | 0.00123 | 852.2 MB/s | 1.70 GB/s |\n\n"
                "```python\ndef bubble_fraction(stages, microbatches):\n"
                "    return (stages - 1) / (microbatches + stages - 1)  # a long line of code\n"
                "```\n\nhttps://example.com/a/very/long/url/that/does/not/break/anywhere/at/all"})
    call(base, "POST", "/api/v1/entries", {"title": "Pipeline notes", "tags": ["pp"],
                                          "body": f"See [[{ring['title']}]] and [[{week}]]."})
    for body in ("second", "third"):
        ring = call(base, "PUT", f"/api/v1/entries/{ring['id']}",
                    {"base_revision": ring["revision"], "body": ring["body"] + "\n\n" + body})
    # no runner here has a GPU: queued anyway, as the run form's second press does
    runs = [call(base, "POST", "/api/v1/runs", {"experiment": "data_parallel",
                                                "params": {**GPU_RUN, "steps": n},
                                                "queue_anyway": True})
            for n in (1, 2)]
    schedule = call(base, "POST", "/api/v1/schedules", {
        "name": "Sunday sweep", "experiment": "data_parallel", "cron": "0 2 1 1 *",
        "timezone": "UTC", "params": GPU_RUN})
    entry = ring["url"]
    return {
        "home": "/", "entry": entry, "letter": f"/weeks/{week}", "past week": "/weeks/2024-W13",
        "site map": "/sitemap", "tag": "/tags/ddp", "search": "/search?q=bucket",
        "filter search": "/search?q=tag:ddp", "new entry": "/entries/new",
        "edit": f"/entries/{ring['id']}/edit", "history": f"/entries/{ring['id']}/history",
        "diff": f"/entries/{ring['id']}/diff?a=1&b=3", "delete": f"/entries/{ring['id']}/delete",
        "settings": "/settings/template", "catalogue": "/experiments",
        "experiment": "/experiments/pipeline",
        "new run": "/experiments/pipeline/run", "first run": "/experiments/zero/run?first=1",
        "runs": "/runs", "run": f"/runs/{runs[0]['id']}",
        "compare": f"/runs/compare?ids={runs[0]['id']},{runs[1]['id']}",
        "schedules": "/schedules", "schedule": f"/schedules/{schedule['id']}",
        "offline": "/offline", "error": "/no/such/page",
    }


def refused(problems: list[str], status: int) -> list[str]:
    """The browser reports a page that answered 4xx as a failed load; that one is expected."""
    return [p for p in problems if f"status of {status}" not in p]


def test_every_page_fits_a_phone_and_logs_nothing(live_server):
    pages = fill(live_server)
    with hard_timeout(TEST_SECONDS):
        for scheme in ("light", "dark"):
            with chromium_page("phone") as (page, problems):
                page.emulate_media(color_scheme=scheme)
                for kind, path in pages.items():
                    response = page.goto(live_server + path)
                    status = response.status
                    assert status == (404 if kind == "error" else 200), (kind, status)
                    page.wait_for_load_state("networkidle")
                    assert_fits(page)
                    if kind == "new entry":  # ready to type the title, on a phone too
                        assert page.evaluate("document.activeElement.id") == "f-title"
                    assert refused(problems, 404) == [], (scheme, kind, problems)
                    problems.clear()
                merge_page(page, live_server, pages["edit"])
                assert_fits(page)
                assert refused(problems, 409) == [], (scheme, "merge", problems)
                problems.clear()
                if scheme == "light":
                    refused_field_stays_in_sight(page, live_server)
                    assert problems == []


def merge_page(page, base: str, edit_path: str) -> None:
    """Reach the merge page as a person does: edit a line that changed meanwhile."""
    page.goto(base + edit_path)
    entry_id = re.search(r"/entries/(\d+)/", edit_path)[1]
    current = call(base, "GET", f"/api/v1/entries/{entry_id}")
    call(base, "PUT", f"/api/v1/entries/{entry_id}", {
        "base_revision": current["revision"],
        "body": current["body"].replace("Measured", "Measured again")})
    page.fill("#f-body", current["body"].replace("Measured", "Did not measure"))
    with page.expect_navigation() as navigation:
        page.get_by_role("button", name="Save", exact=True).click()
    assert navigation.value.status == 409
    assert "Did not measure" in page.input_value("#f-body")  # nothing typed is lost


def refused_field_stays_in_sight(page, base: str) -> None:
    """A field the browser refuses, further down a long form, is scrolled to above the
    phone's sticky Run bar, not under it."""
    page.goto(base + "/experiments/pipeline/run")
    page.fill("#p-seed", "-1")  # below its minimum: the browser itself refuses it
    page.evaluate("window.scrollTo(0, 0)")
    page.get_by_role("button", name="Run pipeline").tap()
    page.wait_for_timeout(300)  # the browser's own scroll to the field
    assert page.evaluate("document.activeElement.id") == "p-seed"
    field = page.locator("#p-seed").bounding_box()
    bar = page.locator(".sticky-actions").bounding_box()
    assert field["y"] + field["height"] <= bar["y"], (field, bar)
    assert page.url.endswith("/experiments/pipeline/run")  # nothing was sent
