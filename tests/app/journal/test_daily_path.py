"""The small things seen on the owner's daily path, each checked where it was seen: the
menu marks each page's own item (after a form error too), 404 and 405 are our pages in our
words, one search box on /search and no keyboard hint on a phone, the letter shows its tags
and is listed once in the site map, restore says it is safe, a new entry starts in its
title, result cards count "1 rank", filter-only search snippets keep code readable, and
compare reads from the oldest run."""

from __future__ import annotations

import re

import pytest

from app.journal import runs
from app.journal.views import cards
from app.models import Run
from app.notebook import search
from tests.helpers import (
    THIS_WEEK,
    Elements,
    create_entry,
    edit_entry,
    load,
    queue,
    schedule_form,
    start_run,
)
from tests.strict_pages import assert_strict_page


def current_item(html: str) -> list[str]:
    nav = re.search(r'<ul class="nav">(.*?)</ul>', html, re.S)[1]
    return [text for attrs, text in Elements(nav).all("a") if attrs.get("aria-current")]


# -- the menu -------------------------------------------------------------------------------


def test_each_page_marks_its_own_menu_item(client, db):
    entry_id = create_entry(client)
    run_id, other = start_run(client), queue(db)
    schedule = client.post("/schedules", data=schedule_form())
    pages = {
        "/": ["Home"], f"/weeks/{THIS_WEEK}": ["This week"], "/weeks/2024-W13": [],
        "/sitemap": ["Site map"], "/tags/gpu": ["Site map"], f"/entries/{entry_id}": [],
        "/experiments": ["Experiments"], "/experiments/pipeline/run": ["Experiments"],
        "/runs": ["Runs"], f"/runs/{run_id}": ["Runs"],
        f"/runs/compare?ids={run_id},{other}": ["Runs"],
        "/schedules": ["Schedules"], schedule.location: ["Schedules"],
    }
    for path, expected in pages.items():
        response = client.get(path, follow_redirects=True)
        assert response.status_code == 200, path
        assert current_item(response.text) == expected, path


def test_a_form_refused_still_marks_its_own_item(client):
    schedule = client.post("/schedules", data=schedule_form(cron="99 99 * * *"))
    assert schedule.status_code == 422
    assert current_item(schedule.text) == ["Schedules"]
    run = client.post("/experiments/pipeline/run", data={"param.steps": "-1"})
    assert run.status_code == 422
    assert current_item(run.text) == ["Experiments"]


def test_experiments_are_in_the_header(client):
    nav = re.search(r'<ul class="nav">(.*?)</ul>', client.get("/").text, re.S)[1]
    assert [text for _, text in Elements(nav).all("a")] == [
        "Home", "This week", "Site map", "Experiments", "Runs", "Schedules", "Calculator"]


# -- error pages ----------------------------------------------------------------------------


def test_404_and_405_are_our_pages_in_our_words(client):
    missing = client.get("/no/such/page")
    assert missing.status_code == 404
    assert_strict_page(missing)
    assert "there is no page at /no/such/page" in missing.text
    assert "requested URL was not found" not in missing.text
    wrong = client.post("/sitemap")
    assert wrong.status_code == 405 and wrong.headers["Allow"]
    assert "/sitemap does not take a POST request (it takes GET)" in wrong.text
    assert "<header" in wrong.text


def test_404_and_405_under_the_api_are_json(client):
    missing = client.get("/api/v1/no-such-thing")
    assert missing.status_code == 404
    assert missing.get_json()["error"]["message"].startswith("there is no page at /api/v1/")
    wrong = client.delete("/api/v1/tags")
    assert wrong.status_code == 405
    assert wrong.get_json()["error"] == {
        "code": "method_not_allowed",
        "message": "/api/v1/tags does not take a DELETE request (it takes GET)"}


def test_a_view_that_says_why_keeps_its_words(client):
    assert "no entries are tagged #nothing" in client.get("/tags/nothing").text


# -- search boxes -----------------------------------------------------------------------------


def test_the_search_page_has_one_search_box(client):
    page = client.get("/search?q=x").text
    assert len(re.findall(r'<input[^>]*type="search"', page)) == 1
    assert 'id="q"' in page and "site-search" not in page


def test_the_header_search_hint_is_left_to_script_on_a_keyboard(client):
    box = re.search(r'<input id="site-search"[^>]*>', client.get("/").text)[0]
    assert 'placeholder="Search"' in box and 'data-key-hint="Search  ( / )"' in box


# -- letters, the site map, history -----------------------------------------------------------


def test_the_letter_shows_its_tags_and_is_listed_once_in_the_site_map(client):
    letter = client.get(f"/api/v1/weeks/{THIS_WEEK}").get_json()["letter"]
    client.put(f"/api/v1/entries/{letter['id']}",
               json={"base_revision": letter["revision"], "tags": ["weekly", "gpu"]})
    page = client.get(letter["url"]).text
    tags = re.search(r'<ul class="tags"[^>]*>(.*?)</ul>', page, re.S)[1]
    assert [text for _, text in Elements(tags).all("a")] == ["#weekly", "#gpu"]
    create_entry(client, title="Same week", date=letter["date"])
    sitemap = client.get("/sitemap").text.split('class="by-week"')[1]
    assert sitemap.count(f'href="/weeks/{THIS_WEEK}"') == 1
    assert "Same week" in sitemap


def test_restore_says_it_is_safe(client):
    entry_id = create_entry(client)
    edit_entry(client, entry_id, 1, body="changed")
    history = client.get(f"/entries/{entry_id}/history").text
    button = re.search(r'<button[^>]*form="restore-1"[^>]*>(.*?)</button>', history)
    assert button[1] == "Restore as new revision"
    assert "as revision 3; nothing is lost" in button[0]
    diff = client.get(f"/entries/{entry_id}/diff?a=1&b=2").text
    assert "Restore revision 1 as a new revision" in diff


# -- the editor starts where you write --------------------------------------------------------


def test_a_new_entry_starts_in_its_title(client):
    fields = Elements(client.get("/entries/new").text).all("input")
    focused = [attrs["id"] for attrs, _ in fields if "autofocus" in attrs]
    assert focused == ["f-title"]
    assert "autofocus" not in re.search(r"<textarea[^>]*>", client.get(
        f"/entries/{create_entry(client)}/edit").text)[0]


def test_a_refused_form_starts_at_the_first_field_to_fix(client):
    page = client.post("/entries/new", data={"title": "ok", "date": "2024-02-30",
                                             "tags": "9bad", "body": "x"}).text
    focused = [a["id"] for a, _ in Elements(page).all("input") if "autofocus" in a]
    assert focused == ["f-date"]


# -- cards, snippets, compare ----------------------------------------------------------------


def test_a_card_counts_one_rank_as_one(db):
    one, two = queue(db, "gemm_roofline"), queue(db, "data_parallel", world_size=2)
    assert re.search(r"\b1 rank\b(?!s)", cards.card(load(db, Run, one)))
    assert "2 ranks" in cards.card(load(db, Run, two))


def test_a_card_from_before_the_cost_model_grew_still_renders(db):
    """result.json stays backward compatible: an old result (no residual, memory or
    peak name) shows dashes where the new columns are."""
    run_id = queue(db, "data_parallel")
    finish(db, run_id, 1000.0)
    html = cards.card(load(db, Run, run_id))
    assert "unexplained" in html and "memory measured / predicted" in html
    assert html.count("<dd>–</dd>") >= 3


CODE = ("Set `bucket_cap_mb=5` for #ddp.\n\n```python\n"
        "def bubble_fraction(stages, microbatches):\n    return 1  # p-1\n```\n\n**Done**.")


@pytest.mark.parametrize("query", ["tag:ddp", "kind:entry", "from:2024-01-01"])
def test_filter_only_snippets_keep_code_readable(client, db, query):
    create_entry(client, title="Buckets", body=CODE, tags="ddp", date="2024-03-27")
    with db.read() as session:
        snippet = search.search(session, query).hits[0].snippet_html
    assert "bucket_cap_mb=5" in snippet
    assert "def bubble_fraction(stages, microbatches):" in snippet
    assert "#ddp" in snippet and "**" not in snippet and "`" not in snippet


def finish(db, run_id: int, tokens_per_s: float) -> None:
    """The runner's part, played in the database: a result with one strategy."""
    result = {"status": "succeeded", "strategies": [
        {"strategy": "ddp", "label": "torch DDP", "tokens_per_s": tokens_per_s}]}
    with db.write() as session:
        run = session.get(Run, run_id)
        for status in (runs.LEASED, runs.RUNNING):
            runs.transition(session, run, status, actor="runner:test")
        runs.store_result(session, run, result)
        runs.transition(session, run, runs.SUCCEEDED, actor="runner:test")


def test_compare_reads_from_the_oldest_run(client, db):
    old, new = queue(db, steps=1), queue(db, steps=2)
    finish(db, old, 20000.0)
    finish(db, new, 30000.0)
    page = client.get(f"/runs/compare?ids={new},{old}").text  # as the run list sends them
    heads = re.findall(r'<th scope="col"><a href="/runs/(\d+)"', page)
    assert heads == [str(old), str(new)]
    assert '<span class="delta better">+50%</span>' in page
    assert f"from the oldest, run #{old} (the baseline)" in page
