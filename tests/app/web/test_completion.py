"""GET /api/v1/complete: what the editor offers after `[[` (titles, weeks, dates) and `#`
(tags): ranked, bounded, drafts only for owners, bad input a 422."""

from __future__ import annotations

import pytest

from tests.helpers import OWNER, THIS_WEEK, VIEWER

NOTES = [
    ("Running notes", "2024-03-01", ["gpu", "run"], "published"),
    ("Pipeline parallelism", "2024-03-27", ["pipeline", "gpu"], "published"),
    ("Notes on pipelines", "2024-03-20", ["pipeline"], "published"),
    ("Generalization bounds", "2024-02-01", ["theory"], "published"),
    ("The runner agent", "2024-03-28", [], "published"),
    ("Secret plan", "2024-03-05", ["gpu", "secretive"], "draft"),
]


@pytest.fixture
def notebook(served):
    owner = served.as_user(OWNER)
    for title, date, tags, status in NOTES:
        assert owner("post", "/api/v1/entries", json={
            "title": title, "date": date, "tags": tags, "status": status}).status_code == 201
    owner("get", "/")  # this week's letter
    return served


def offered(served, login=OWNER, **args) -> list[tuple[str, str]]:
    response = served.as_user(login)("get", "/api/v1/complete", query_string=args)
    assert response.status_code == 200, response.text
    assert response.headers["Cache-Control"] == "private, no-store"
    return [(item["insert"], item["kind"]) for item in response.get_json()["items"]]


def inserts(served, login=OWNER, **args) -> list[str]:
    return [insert for insert, _ in offered(served, login, **args)]


def test_titles_that_start_with_the_text_come_first(notebook):
    assert inserts(notebook, kind="link", prefix="pipe") == [
        "Pipeline parallelism", "Notes on pipelines"]
    assert inserts(notebook, kind="link", prefix="notes") == [
        "Notes on pipelines", "Running notes"]
    assert inserts(notebook, kind="link", prefix="pip par") == ["Pipeline parallelism"]


def test_a_typed_word_longer_than_its_stem_still_finds_the_title(notebook):
    # the index keeps "running" as "run" and "generalization" as "gener"
    assert inserts(notebook, kind="link", prefix="runn") == ["Running notes",
                                                              "The runner agent"]
    assert inserts(notebook, kind="link", prefix="generali") == ["Generalization bounds"]


def test_this_week_today_and_recent_entries_for_no_text(notebook):
    items = offered(notebook, kind="link", prefix="")
    assert items[0] == (THIS_WEEK, "week")
    assert items[1][1] == "date"
    assert items[2:5] == [("The runner agent", "entry"), ("Pipeline parallelism", "entry"),
                          ("Notes on pipelines", "entry")]


def test_digits_offer_letters_and_days(notebook):
    assert inserts(notebook, kind="link", prefix="2024-03") == [
        "2024-03-28", "2024-03-27", "2024-03-20", "2024-03-05", "2024-03-01"]
    assert inserts(notebook, kind="link", prefix=THIS_WEEK[:7].lower())[0] == THIS_WEEK


def test_drafts_are_offered_only_to_owners(notebook):
    assert inserts(notebook, kind="link", prefix="secret") == ["Secret plan"]
    assert inserts(notebook, VIEWER, kind="link", prefix="secret") == []
    assert "2024-03-05" not in inserts(notebook, VIEWER, kind="link", prefix="2024-03")
    assert inserts(notebook, kind="tag", prefix="se") == ["secretive"]
    assert inserts(notebook, VIEWER, kind="tag", prefix="se") == []


def test_tags_most_used_first_with_or_without_the_hash(notebook):
    assert inserts(notebook, kind="tag", prefix="")[:2] == ["gpu", "pipeline"]
    assert inserts(notebook, kind="tag", prefix="#p") == ["pipeline"]
    assert offered(notebook, kind="tag", prefix="t") == [("theory", "tag")]


def test_answers_are_bounded(notebook):
    assert len(inserts(notebook, kind="link", prefix="", limit="2")) == 2
    assert inserts(notebook, kind="link", prefix="zzz") == []
    for odd in ('"', "_", "*", "(", "OR", "AND NOT", "[[x]]", "🙂"):
        assert isinstance(inserts(notebook, kind="link", prefix=odd), list)


@pytest.mark.parametrize("args,field", [
    ({"kind": "title", "prefix": "x"}, "kind"),
    ({"prefix": "x"}, "kind"),
    ({"kind": "link", "prefix": "x" * 101}, "prefix"),
    ({"kind": "link", "limit": "21"}, "limit"),
    ({"kind": "tag", "limit": "0"}, "limit"),
])
def test_bad_questions_are_422(notebook, args, field):
    response = notebook.as_user(OWNER)("get", "/api/v1/complete", query_string=args)
    assert response.status_code == 422
    assert response.get_json()["error"]["field"] == field


def test_nobody_gets_nothing(notebook):
    assert notebook.as_user(None)("get", "/api/v1/complete?kind=tag").status_code == 403


def test_the_words_today_and_this_week_complete_to_them(notebook):
    """`[[` alone offers today and this week; typing their words keeps offering them."""
    assert offered(notebook, kind="link", prefix="tod")[0][1] == "date"
    assert offered(notebook, kind="link", prefix="Today")[0][1] == "date"
    assert offered(notebook, kind="link", prefix="this")[0] == (THIS_WEEK, "week")
    assert offered(notebook, kind="link", prefix="this week")[0] == (THIS_WEEK, "week")
    assert (THIS_WEEK, "week") not in offered(notebook, kind="link", prefix="pipe")
