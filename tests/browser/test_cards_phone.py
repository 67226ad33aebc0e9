"""Result cards in a real browser against the real server (`commonplace up`): a real
finished pipeline run and a real zero run (tests/real_runs.py), on their run pages and in
the weekly letter that holds their cards, at 375 px and at 1280 px. No console error nor
CSP refusal, no sideways scrolling, chart labels at least 12 px as the browser draws them,
and the <details> behind the key numbers open."""

from __future__ import annotations

import pytest

from app import create_app
from app.journal import posting
from app.models import Run
from tests.browser.harness import BROWSER, assert_fits, chromium_page, hard_timeout, screenshot
from tests.helpers import load
from tests.real_runs import lab_output, store_run

pytestmark = BROWSER
TEST_SECONDS = 240  # the two lab runs (cached once per session) and two browsers

# The smallest rendered size of any label in a card's charts, in CSS pixels.
SMALLEST_LABEL = """() => Math.min(...[...document.querySelectorAll('svg.card-chart text')]
  .filter(t => t.getBoundingClientRect().width > 0)
  .map(t => parseFloat(t.getAttribute('font-size')) * t.getScreenCTM().a))"""


@pytest.fixture(scope="module")
def carded(module_server, tmp_path_factory):
    """The two runs stored as the runner stores them, and their cards posted to a letter:
    once for the module, whose tests only read them."""
    live_server, data_dir = module_server
    app = create_app({"DATA_DIR": data_dir,
                      "DATABASE_URL": f"sqlite:///{data_dir}/commonplace.db"})
    ids = {name: store_run(app, name, lab_output(tmp_path_factory, name))
           for name in ("pipeline", "zero")}
    posting.post_cards(app.extensions["db"], "UTC")
    letter = load(app.extensions["db"], Run, ids["pipeline"]).carded_entry_id
    assert letter is not None
    return live_server, ids, letter


def look(page, problems, url: str, name: str, cards: int) -> None:
    page.goto(url)
    assert page.locator("figure.run-card").count() == cards
    assert page.locator("svg.card-chart").count() >= 2 * cards  # step time and memory
    assert page.evaluate(SMALLEST_LABEL) >= 12
    assert_fits(page)
    summary = page.locator("figure.run-card details > summary").first
    details = summary.locator("xpath=..")
    assert not details.evaluate("d => d.open")
    summary.click()
    assert details.evaluate("d => d.open")
    assert details.locator("svg.card-chart").first.is_visible()
    assert page.evaluate(SMALLEST_LABEL) >= 12  # the charts behind it, too
    assert_fits(page)
    screenshot(page, name)
    assert problems == [], problems


@pytest.mark.parametrize("device", ["phone", "desktop"])
def test_cards_read_on_a_phone_and_a_desktop(carded, device):
    base, ids, letter = carded
    with hard_timeout(TEST_SECONDS), chromium_page(device) as (page, problems):
        for name, run_id in ids.items():
            look(page, problems, f"{base}/runs/{run_id}", f"card-{name}-{device}", 1)
            lesson = page.locator("figure.run-card .card-lesson")
            assert lesson.is_visible() and any(c.isdigit() for c in lesson.inner_text())
        look(page, problems, f"{base}/entries/{letter}", f"card-letter-{device}", 2)
