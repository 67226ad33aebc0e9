"""The schedule form in a real browser: a "when" the server refused is said once, beside
the field, and not again by the live preview until the value changes; switching the
experiment shows its parameters and saves it, the old experiment's never refused."""

from __future__ import annotations

from tests.browser.harness import BROWSER, call, chromium_page, hard_timeout

pytestmark = BROWSER
TEST_SECONDS = 120  # a hard limit for the test, browser start included


def test_a_refused_when_is_said_once(live_server):
    with hard_timeout(TEST_SECONDS), chromium_page("desktop") as (page, problems):
        page.goto(live_server + "/schedules")
        page.fill("#s-cron", "61 * * * *")
        page.locator("#s-cron").evaluate("el => el.form.requestSubmit()")
        page.wait_for_selector("#s-cron-error")
        page.wait_for_load_state("networkidle")  # a preview, if one were asked, has answered
        said = page.get_by_text("higher than the maximum")
        assert said.count() == 1 and said.first.is_visible()
        page.fill("#s-cron", "62 * * * *")  # a change: now the preview speaks, alone
        page.wait_for_selector("#s-cron-preview:not(:empty)")
        assert page.locator("#s-cron-error").is_hidden()
        assert not [p for p in problems if "422" not in p], problems


def test_switching_the_experiment_then_saving_is_taken(live_server):
    with hard_timeout(TEST_SECONDS), chromium_page("desktop") as (page, problems):
        page.goto(live_server + "/schedules?experiment=collectives")
        page.fill("#s-name", "Switched")
        with page.expect_navigation():  # the page's script submits the switch
            page.select_option("#s-experiment", "gpt_mfu")
        page.wait_for_selector("text=Review them, then save")
        assert page.locator("#p-peak_tflops").count() == 1
        with page.expect_navigation():
            page.locator("#s-name").evaluate("el => el.form.requestSubmit()")
        assert "/schedules/" in page.url and not problems, problems
        saved = call(live_server, "GET", "/api/v1/schedules")["schedules"]
        assert [(s["name"], s["experiment"]) for s in saved] == [("Switched", "gpt_mfu")]
