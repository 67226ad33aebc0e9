"""The compare table on a phone (375 px) in real Chromium against the real server (`commonplace
up`): three finished runs side by side. The page itself does not scroll sideways; the
table scrolls inside its own box, and every cell of it can be brought into view there,
whole and not hidden under the sticky column of labels, and each section keeps its name
in view. No console error nor CSP refusal."""

from __future__ import annotations

import pytest

from app.journal import runs
from tests.browser.harness import BROWSER, assert_fits, chromium_page, hard_timeout, screenshot

pytestmark = BROWSER
TEST_SECONDS = 120

STRATEGY = {"strategy": "ddp", "label": "torch DDP with bucketed all-reduce",
            "tokens_per_s": 20000.0, "step_time_s": {"median": 0.010},
            "prediction": {"step_time_s": 0.004, "residual_s": 0.006},
            "ratios": {"step_time": 2.5, "memory_peak": 1.02}, "mfu": {"value": 0.004},
            "correctness": {"passed": True}}


def result(tokens_per_s: float, residual_s: float) -> dict:
    return {"status": "succeeded",
            "environment": {"torch": "2.13.0+cpu", "backend": "gloo",
                            "device_model": "AMD EPYC 9654 96-Core Processor"},
            "strategies": [{**STRATEGY, "tokens_per_s": tokens_per_s,
                            "prediction": {"step_time_s": 0.004, "residual_s": residual_s}},
                           {**STRATEGY, "strategy": "dp_naive", "label": "naive"}]}


@pytest.fixture
def compare_url(make_app, live_server) -> str:
    """Three finished runs of different sizes, stored as the runner would store them."""
    db = make_app().extensions["db"]  # the live server's data directory and database
    ids = []
    with db.write() as session:
        for steps, speed, residual in ((1, 20000.0, 0.006), (2, 30000.0, -0.00382),
                                       (3, 12500.0, 0.0)):
            run = runs.create(session, "data_parallel", {"steps": steps}, actor="test")
            session.flush()
            for status in (runs.LEASED, runs.RUNNING):
                runs.transition(session, run, status, actor="runner:test")
            runs.store_result(session, run, result(speed, residual))
            runs.transition(session, run, runs.SUCCEEDED, actor="runner:test")
            ids.append(run.id)
    db.engine.dispose()
    return f"{live_server}/runs/compare?ids={','.join(map(str, ids))}"


# Brings one cell into view inside the table's box, as a reader scrolling it would, and
# says whether the whole cell is then on the screen, inside the box, and on top (not under
# the sticky column of labels).
SHOW = """cell => {
  cell.scrollIntoView({block: 'center', inline: 'end'});
  const r = cell.getBoundingClientRect();
  const box = cell.closest('.table-wrap').getBoundingClientRect();
  const inside = r.width > 0 && r.left >= Math.max(0, box.left) - 1
    && r.right <= Math.min(innerWidth, box.right) + 1;
  const hit = document.elementFromPoint(r.left + 2, r.top + r.height / 2);
  const onTop = !!hit && (hit === cell || cell.contains(hit));
  return inside && onTop ? '' : `${cell.textContent.trim().slice(0, 40)} at ${r.left}..${r.right}`;
}"""


# The table's box scrolled to its far end: every section's name still in view there.
SECTIONS_AT_THE_END = """() => {
  const box = document.querySelector('.table-wrap');
  box.scrollLeft = box.scrollWidth;
  const edge = box.getBoundingClientRect();
  return [...box.querySelectorAll('.section-label')].filter(label => {
    const r = label.getBoundingClientRect();
    return r.left < edge.left - 1 || r.right > edge.right + 1;
  }).map(label => label.textContent);
}"""


def test_the_whole_compare_table_can_be_read_on_a_phone(compare_url):
    with hard_timeout(TEST_SECONDS), chromium_page("phone") as (page, problems):
        assert page.goto(compare_url).status == 200
        assert_fits(page)
        table = page.locator("table.compare-table")
        assert "\u22123.82 ms" in table.inner_text()  # a minus sign, not a hyphen
        cells = table.locator("th:not([colspan]), td:not([colspan])")
        assert cells.count() > 40
        hidden = [why for i in range(cells.count()) if (why := cells.nth(i).evaluate(SHOW))]
        screenshot(page, "compare-phone")
        assert hidden == [], hidden
        assert page.evaluate(SECTIONS_AT_THE_END) == []
        assert_fits(page)
        assert problems == [], problems
