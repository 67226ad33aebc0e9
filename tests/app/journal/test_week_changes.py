"""The week's letter opens its Experiments section with the changes that matter: a run
that moved a number beyond its noise puts the week's changes block there, a regression
as a warning callout, and the feed carries it."""

from __future__ import annotations

import feedparser

from app.journal import posting
from app.journal.views import week_changes
from tests.app.journal.test_trends import SMALL, collectives_result, finished
from tests.helpers import THIS_WEEK


def test_the_letter_opens_its_experiments_with_the_weeks_regression(client, db):
    first = finished(db, "collectives", SMALL, collectives_result(40e9))
    posting.post_cards(db, "UTC")
    letter = client.get(f"/api/v1/weeks/{THIS_WEEK}").get_json()["letter"]
    assert "```changes" not in letter["body"]  # nothing to compare yet: no block

    second = finished(db, "collectives", SMALL, collectives_result(30e9))
    calm = finished(db, "collectives", SMALL, collectives_result(30.3e9))
    posting.post_cards(db, "UTC")
    letter = client.get(f"/api/v1/weeks/{THIS_WEEK}").get_json()["letter"]
    body, html = letter["body"], letter["html"]
    section = body.index("## Experiments")
    assert section < body.index(week_changes.block(THIS_WEEK)) < body.index(f"id: {first}")
    assert body.count("```changes") == 1
    opening = html[html.index('class="week-changes"'):html.index(f"Run {first} ·")]
    assert 'class="callout callout-warning"' in opening
    assert f'Regression: <a href="/runs/{second}">' in opening
    assert "all_reduce at 65.5 kB: 30 GB/s, −25% vs " in opening
    assert f"(#{first}), beyond its ±4% noise" in opening
    assert f"/runs/{calm}" not in opening  # within noise: not a change that matters

    feed = feedparser.parse(client.get("/feed.atom").data)
    item = next(e for e in feed.entries if f"Run {second}" in e.content[0].value)
    assert "callout-warning" in item.content[0].value


def test_the_letters_file_writes_the_regression_as_a_callout(db):
    first = finished(db, "collectives", SMALL, collectives_result(40e9))
    second = finished(db, "collectives", SMALL, collectives_result(30e9))
    with db.read() as session:
        text, files = week_changes.changes_markdown(session, f"week: {THIS_WEEK}")
    assert files == {}
    assert text.startswith(f"> [!warning] Regression: [Run {second} · Collective bandwidth "
                           f"sweep](/runs/{second})")
    assert f"(#{first}), beyond its ±4% noise" in text


def test_a_changes_block_without_a_week_says_what_it_needs(client):
    for source in ("", "week: 2026-W99", "week: soon"):
        response = client.post("/api/v1/entries", json={
            "title": "c", "body": f"```changes\n{source}\n```"})
        assert "a changes block needs a line" in response.get_json()["html"]
