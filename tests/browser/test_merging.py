"""Two places writing the same letter, in Chromium against the real server (`commonplace
up`): an editor open while a finishing run's card is posted saves without a conflict page
and keeps both; two devices editing different sections both land; overlapping edits reach
a merge page that shows just the overlap and, saved as offered, loses nothing."""

from __future__ import annotations

import datetime as dt
import json
import re
import urllib.request

from app import create_app
from app.journal import posting, runs
from app.models import Run
from app.notebook import isoweeks
from tests.browser.harness import BROWSER, browser_context, call, chromium_page, hard_timeout
from tests.helpers import SMALL

pytestmark = BROWSER
TEST_SECONDS = 120




def letter(base: str) -> dict:
    week = isoweeks.iso_week(dt.datetime.now(dt.UTC).date())  # the server runs in UTC
    with urllib.request.urlopen(f"{base}/api/v1/weeks/{week}", timeout=20) as response:
        return json.load(response)["letter"]


def post_a_finished_runs_card(data_dir) -> int:
    """What the scheduler does when a run finishes, done here on the same database."""
    app = create_app({"DATA_DIR": data_dir, "DATABASE_URL": f"sqlite:///{data_dir}/commonplace.db"})
    db = app.extensions["db"]
    with db.write() as session:
        run = runs.create(session, "data_parallel", SMALL, actor="browser-test")
        run.status, run.finished_at, run.result = "SUCCEEDED", dt.datetime.now(dt.UTC), {}
        run_id = run.id
    posting.post_cards(db, "UTC")  # (or the scheduler of `up` got there first)
    with db.read() as session:
        assert session.get(Run, run_id).carded_entry_id is not None
    return run_id


def add_to_section(page, section: str, words: str) -> None:
    body = page.input_value("#f-body").replace("\r\n", "\n")
    changed = re.sub(rf"^## {section}$", f"## {section}\n\n{words}", body, count=1, flags=re.M)
    assert changed != body
    page.fill("#f-body", changed)


def test_a_card_posted_while_the_letter_is_open_merges_with_the_owners_words(live_server,
                                                                            data_dir):
    current = letter(live_server)
    with hard_timeout(TEST_SECONDS), chromium_page("phone") as (page, problems):
        page.goto(f"{live_server}/entries/{current['id']}/edit")
        run_id = post_a_finished_runs_card(data_dir)  # the card lands while the editor is open
        add_to_section(page, "Notes", "Typed on the train.")
        page.click("button.primary[type=submit]")
        page.wait_for_load_state()
        notice = page.locator(".alert.ok")
        assert "merged with revision" in notice.inner_text()
        assert page.locator(".run-card").count() == 1  # the card, rendered in the letter
        assert "Typed on the train." in page.inner_text("article.letter")
        assert problems == []
    body = letter(live_server)["body"]
    assert "Typed on the train." in body and f"id: {run_id}" in body


def test_two_devices_in_different_sections_both_land(live_server):
    current = letter(live_server)
    edit = f"{live_server}/entries/{current['id']}/edit"
    with hard_timeout(TEST_SECONDS), browser_context() as context:
        phone, laptop = context.new_page(), context.new_page()
        phone.goto(edit)
        laptop.goto(edit)
        add_to_section(phone, "Reading", "A paper on ZeRO.")
        add_to_section(laptop, "Next", "Run the sweep at 8 GPUs.")
        phone.click("button.primary[type=submit]")
        phone.wait_for_load_state()
        laptop.click("button.primary[type=submit]")
        laptop.wait_for_load_state()
        assert "merged with revision" in laptop.locator(".alert.ok").inner_text()
    body = letter(live_server)["body"]
    assert "A paper on ZeRO." in body and "Run the sweep at 8 GPUs." in body


def test_overlapping_edits_reach_a_merge_page_that_loses_nothing(live_server):
    current = letter(live_server)
    body = current["body"].replace("## Notes", "## Notes\n\nThe bubble is ?", 1)
    call(live_server, "PUT", f"/api/v1/entries/{current['id']}",
         {"body": body, "base_revision": current["revision"]})
    edit = f"{live_server}/entries/{current['id']}/edit"
    with hard_timeout(TEST_SECONDS), browser_context() as context:
        phone, laptop = context.new_page(), context.new_page()
        phone.goto(edit)
        laptop.goto(edit)
        for page, words in ((phone, "Phone: the bubble is 1/m."),
                            (laptop, "Laptop: the bubble is (p-1)/(m+p-1).")):
            page.fill("#f-body", page.input_value("#f-body").replace("The bubble is ?", words))
        phone.click("button.primary[type=submit]")
        phone.wait_for_load_state()
        laptop.click("button.primary[type=submit]")
        laptop.wait_for_load_state()
        assert "Not saved" in laptop.inner_text("main")
        assert laptop.locator(".merge-place").count() == 1  # only the overlapping place
        offered = laptop.input_value("#f-body")
        assert "Phone: the bubble is 1/m." in offered
        assert "Laptop: the bubble is (p-1)/(m+p-1)." in offered
        laptop.click("form.editor button.primary[type=submit]")  # save it as offered
        laptop.wait_for_load_state()
    body = letter(live_server)["body"]
    assert "Phone: the bubble is 1/m." in body and "Laptop: the bubble is (p-1)/(m+p-1)." in body
