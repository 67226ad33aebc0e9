"""The week's letter opens its Experiments section with the changes that matter: one group
per experiment and parameters that ran in the week, its latest run against the runs before
the week, the week's range, a regression named once with the run where it appeared, the
week's runs linked rather than repeated; in the page, the feed, the letter's file and the
trend page alike."""

from __future__ import annotations

import datetime as dt
import re

import feedparser

from app.journal import posting
from app.journal.views import cards, week_changes
from app.models import Run, utcnow
from tests.app.journal.test_trends import SMALL, collectives_result, finished
from tests.helpers import THIS_WEEK


def weeks_ago(n: int) -> dt.datetime:
    return utcnow() - dt.timedelta(weeks=n)


def history(db, values=(40e9, 41e9, 39e9, 40e9), params=SMALL) -> list[int]:
    """Runs of the weeks before this one, oldest first (their median: 40 GB/s)."""
    return [finished(db, "collectives", params, collectives_result(v), at=weeks_ago(n))
            for n, v in zip(range(len(values), 0, -1), values, strict=True)]


def block_html(db) -> str:
    with db.read() as session:
        return week_changes.changes_html(session, f"week: {THIS_WEEK}")


def test_a_week_of_repeated_runs_is_one_group_against_the_weeks_before(db):
    history(db)
    calm = finished(db, "collectives", SMALL, collectives_result(40.2e9))
    slow = finished(db, "collectives", SMALL, collectives_result(30e9))
    again = finished(db, "collectives", SMALL, collectives_result(30.5e9))
    latest = finished(db, "collectives", SMALL, collectives_result(29.8e9))
    html = block_html(db)
    assert html.count('class="callout callout-warning week-change"') == 1
    assert html.count("Regression: ") == 1  # the group's, once
    assert "Run " not in html  # no line per run
    head = re.search(r'<p class="callout-title">(.*?)</p>', html)[1]
    assert ">Collective bandwidth sweep</a>: 4 runs this week (" in head
    for run_id in (calm, slow, again, latest):
        assert f'<a href="/runs/{run_id}">#{run_id}</a>' in head
    assert head.endswith("against the median of 4 runs before this week")
    items = re.findall(r"<li>(.*?)</li>", html)
    assert len(items) == 2  # one per size of the sweep, not one per run and size
    line = next(i for i in items if "65.5 kB" in i)
    assert line.startswith("<strong>Regression:</strong> all_reduce at 65.5 kB: 29.8 GB/s "
                           f'in <a href="/runs/{latest}">#{latest}</a>, −26% from 40 GB/s, '
                           "beyond its ±4% noise; this week 29.8 GB/s to 40.2 GB/s; "
                           f'a regression since <a href="/runs/{slow}">#{slow}</a>')


def test_a_card_run_again_within_its_week_points_to_the_weeks_sum(db):
    history(db)
    first = finished(db, "collectives", SMALL, collectives_result(40.2e9))
    again = finished(db, "collectives", SMALL, collectives_result(30e9))
    with db.read() as session:
        repeat, opening = (cards.run_card(session, f"id: {i}") for i in (again, first))
    assert f'Run again within {THIS_WEEK}: <a href="/weeks/{THIS_WEEK}">its letter</a>' \
        in repeat
    assert "Run again within" not in opening  # its run before is of an earlier week


def test_a_regression_the_latest_run_recovered_from_is_said_once_not_flagged(db):
    history(db)
    slow = finished(db, "collectives", SMALL, collectives_result(30e9))
    finished(db, "collectives", SMALL, collectives_result(40.1e9))
    html = block_html(db)
    assert "callout" not in html and "<strong>Regression" not in html
    assert f'<a href="/runs/{slow}">#{slow}</a> was a regression (30 GB/s), recovered since' \
        in html
    assert "within its ±4% noise" in html


def test_each_parameter_set_is_its_own_group_and_quiet_ones_are_left_out(db):
    history(db)
    bigger = {**SMALL, "max_bytes": 1 << 17}
    history(db, params=bigger)
    finished(db, "collectives", SMALL, collectives_result(40.3e9))  # within noise
    faster = finished(db, "collectives", bigger, collectives_result(50e9, size=1 << 17))
    html = block_html(db)
    assert html.count('class="week-change"') == 1
    with db.read() as session:
        key = session.get(Run, faster).param_key
    assert (f'<a href="/trends/{key}">Collective bandwidth sweep</a>: run '
            f'<a href="/runs/{faster}">#{faster}</a>, against the median of 4') in html


def test_a_single_run_this_week_is_measured_against_the_one_before(db):
    (before,) = history(db, values=(40e9,))
    latest = finished(db, "collectives", SMALL, collectives_result(30e9))
    html = block_html(db)
    assert f'run <a href="/runs/{latest}">#{latest}</a>, against ' in html
    assert f'(<a href="/runs/{before}">#{before}</a>), the run before' in html
    assert f" in #{latest}" not in html  # one run: its number needs no "in #N"


def test_a_busy_week_links_its_first_and_last_runs(db):
    history(db)
    ids = [finished(db, "collectives", SMALL, collectives_result(v))
           for v in (40e9, *[30e9] * 9)]
    html = block_html(db)
    head = re.search(r'<p class="callout-title">(.*?)</p>', html)[1]
    linked = [int(i) for i in re.findall(r'href="/runs/(\d+)"', head)]
    assert linked == [*ids[:3], *ids[-3:]]
    assert "10 runs this week" in head and "…" in head
    assert "against the median of 4 runs" in head


def test_a_first_week_says_so_with_its_range_in_the_page_the_feed_and_the_file(
        client, db, data_dir):
    """Nothing before the week: no run of the same week is taken for a reference."""
    first = finished(db, "collectives", SMALL, collectives_result(40e9))
    second = finished(db, "collectives", SMALL, collectives_result(30e9))
    third = finished(db, "collectives", SMALL, collectives_result(30.3e9))
    posting.post_cards(db, "UTC")
    runs = f"#{first}, #{second}, #{third}"
    said = (f"Collective bandwidth sweep: the first week of these parameters, 3 runs ({runs}), "
            "nothing before to compare with")
    line = f"all_reduce at 65.5 kB: 30 GB/s to 40 GB/s over 3 runs, 30.3 GB/s in #{third}"
    letter = client.get(f"/api/v1/weeks/{THIS_WEEK}").get_json()["letter"]
    assert letter["body"].count("```changes") == 1  # a new series measured: said once
    texts = {"page": letter["html"],
             "feed": next(e.content[0].value for e in feedparser.parse(
                 client.get("/feed.atom").data).entries if "week-changes" in e.content[0].value)}
    with db.read() as session:
        key = session.get(Run, third).param_key
    texts["trend page"] = client.get(f"/trends/{key}").text
    for where, html in texts.items():
        start = html.index('<div class="week-changes">')  # the block, not the cards
        words = re.sub(r"<[^>]+>", "", html[start:html.index("</div>", start)])
        assert said in words and line in words, where
        assert "Regression" not in words and "against #" not in words, where
        assert " from 40 GB/s" not in words and "beyond" not in words, where
    mirrored = next((data_dir / "notes").rglob(f"{THIS_WEEK}.md")).read_text()
    assert f"[#{third}]({THIS_WEEK}.md#^run-{third})" in mirrored  # its card, in this file
    unlinked = re.sub(r"\[(#\d+)\]\([^)]*\)", r"\1", mirrored)
    assert f"- {said}\n    - {line}" in unlinked


def test_a_first_week_of_one_run_says_so_on_the_trend_page(db, client):
    only = finished(db, "collectives", SMALL, collectives_result(40e9))
    with db.read() as session:
        key = session.get(Run, only).param_key
    assert "No number moved" in block_html(db)  # nothing to say in the letter
    page = client.get(f"/trends/{key}").text
    assert "The first week of these parameters, 1 run: nothing before to compare with" in page
    assert "against the runs before" not in page


def test_the_letter_opens_its_experiments_with_the_weeks_regression(client, db):
    history(db)
    first = finished(db, "collectives", SMALL, collectives_result(40e9))
    posting.post_cards(db, "UTC")
    letter = client.get(f"/api/v1/weeks/{THIS_WEEK}").get_json()["letter"]
    assert "```changes" not in letter["body"]  # within noise: no block

    second = finished(db, "collectives", SMALL, collectives_result(30e9))
    third = finished(db, "collectives", SMALL, collectives_result(30.3e9))
    posting.post_cards(db, "UTC")
    letter = client.get(f"/api/v1/weeks/{THIS_WEEK}").get_json()["letter"]
    body, html = letter["body"], letter["html"]
    section = body.index("## Experiments")
    assert section < body.index(week_changes.block(THIS_WEEK)) < body.index(f"id: {first}")
    assert body.count("```changes") == 1
    opening = html[html.index('class="week-changes"'):html.index(f"Run {first} ·")]
    assert opening.count('class="callout callout-warning') == 1
    assert opening.count("Regression: ") == 1
    assert "3 runs this week" in opening
    assert "against the median of 4 runs before this week" in opening
    assert "all_reduce at 65.5 kB: 30.3 GB/s in " in opening
    assert f'a regression since <a href="/runs/{second}">#{second}</a>' in opening
    assert f'<a href="/runs/{third}">#{third}</a>' in opening

    feed = feedparser.parse(client.get("/feed.atom").data)
    item = next(e for e in feed.entries if "week-changes" in e.content[0].value)
    text = item.content[0].value
    assert "callout-warning" in text and text.count("Regression: ") == 1
    assert "3 runs this week" in text


def test_the_letters_file_writes_the_group_as_a_callout(db):
    history(db)
    slow = finished(db, "collectives", SMALL, collectives_result(30e9))
    latest = finished(db, "collectives", SMALL, collectives_result(30.2e9))
    with db.read() as session:
        text, files = week_changes.changes_markdown(session, f"week: {THIS_WEEK}")
    assert files == {}
    lines = text.splitlines()
    # no link to the app's pages: a file knows no other file here (an export links them)
    assert lines[0] == (f"> [!warning] Regression: Collective bandwidth sweep: 2 runs this "
                        f"week (#{slow}, #{latest}), against the median of 4 runs before "
                        "this week")
    assert len(lines) == 3 and all(line.startswith("> - **Regression:** ") for line in lines[1:])
    assert f"a regression since #{slow}" in text
    assert "Run " not in text and "](" not in text


def test_the_trend_page_sums_up_the_latest_runs_week_as_the_letter_does(db, client):
    history(db)
    finished(db, "collectives", SMALL, collectives_result(30e9))
    latest = finished(db, "collectives", SMALL, collectives_result(30.2e9))
    with db.read() as session:
        key = session.get(Run, latest).param_key
    page = client.get(f"/trends/{key}").text
    week = page[page.index('id="week-h"'):page.index("</section>", page.index('id="week-h"'))]
    assert THIS_WEEK in week
    assert block_html(db) in week  # the letter's words


def test_a_quiet_week_says_so_on_the_trend_page(db, client):
    history(db)
    latest = finished(db, "collectives", SMALL, collectives_result(40.1e9))
    with db.read() as session:
        key = session.get(Run, latest).param_key
    assert "No number moved" in block_html(db)
    page = client.get(f"/trends/{key}").text
    assert f"1 run of these parameters in {THIS_WEEK}; no number moved" in page


def test_a_changes_block_without_a_week_says_what_it_needs(client):
    for source in ("", "week: 2026-W99", "week: soon"):
        response = client.post("/api/v1/entries", json={
            "title": "c", "body": f"```changes\n{source}\n```"})
        assert "a changes block needs a line" in response.get_json()["html"]
