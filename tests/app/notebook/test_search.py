"""Search: bm25 ranking with title and tags above body, snippets, the query language."""

import pytest

from app import errors
from app.notebook import entries, letters, search, search_budget
from tests.helpers import OWNER, VIEWER


@pytest.fixture
def notebook(db):
    rows = [
        ("2024-03-25", "Pipeline bubbles", "gpipe and 1f1b schedules", ["pp"]),
        ("2024-03-26", "Reading list", "a long note mentioning pipeline once among many other "
         "words about reading, papers, books and blogs", ["reading"]),
        ("2024-03-27", "Collectives", "measured all_reduce bandwidth over gloo", ["comm", "pp"]),
        ("2024-04-02", "Tensor split", "megatron column then row `<script>alert(1)</script>`",
         ["tp"]),
        ("2024-04-03", "Draft thoughts", "pipeline draft idea", []),
    ]
    with db.write() as session:
        for date, title, body, tags in rows:
            entries.create(session, author="x", date=date, title=title, body=body, tags=tags,
                           status="draft" if title.startswith("Draft") else "published")
        letters.ensure_letter(session, "2024-W13", "x")
    return db


def titles(db, q, **kw):
    with db.read() as session:
        return [h.entry.title for h in search.search(session, q, **kw).hits]


def test_title_match_outranks_body_mention(notebook):
    assert titles(notebook, "pipeline")[0] == "Pipeline bubbles"
    assert set(titles(notebook, "pipeline")) == {"Pipeline bubbles", "Reading list",
                                                 "Draft thoughts"}


def test_tag_weight_outranks_body(notebook):
    with notebook.write() as session:
        entries.create(session, author="x", date="2024-05-01", title="Misc", body="comm comm",
                       tags=[])
    assert titles(notebook, "comm")[0] == "Collectives"


def test_prefix_and_phrase(notebook):
    assert titles(notebook, "collect*") == ["Collectives"]
    assert titles(notebook, '"column then row"') == ["Tensor split"]
    assert titles(notebook, '"row then column"') == []


def test_stemming_finds_other_forms(notebook):
    assert titles(notebook, "measure") == ["Collectives"]


def test_or_and_exclude(notebook):
    assert set(titles(notebook, "gpipe OR megatron")) == {"Pipeline bubbles", "Tensor split"}
    assert set(titles(notebook, "pipeline -gpipe")) == {"Reading list", "Draft thoughts"}


def test_filters(notebook):
    assert set(titles(notebook, "tag:pp")) == {"Pipeline bubbles", "Collectives"}
    assert titles(notebook, "pipeline tag:pp") == ["Pipeline bubbles"]
    assert set(titles(notebook, "from:2024-04-01")) == {"Tensor split", "Draft thoughts"}
    assert set(titles(notebook, "to:2024-03-25")) == {"Pipeline bubbles", "Week 2024-W13"}
    assert set(titles(notebook, "week:2024-W14")) == {"Tensor split", "Draft thoughts"}
    assert titles(notebook, "kind:week") == ["Week 2024-W13"]


def test_drafts_hidden_when_asked(notebook):
    assert "Draft thoughts" not in titles(notebook, "pipeline", include_drafts=False)


def test_snippets_are_highlighted_and_escaped(notebook):
    with notebook.read() as session:
        hit = search.search(session, "megatron").hits[0]
    assert "<mark>megatron</mark>" in hit.snippet_html
    assert "<script>" not in hit.snippet_html and "&lt;script&gt;" in hit.snippet_html


def test_index_follows_edits_in_the_same_transaction(notebook):
    with notebook.write() as session:
        e = entries.get(session, next(iter(search.search(session, "gloo").hits)).entry.id)
        entries.update(session, e, {"body": "now about nccl"}, base_revision=e.revision,
                       author="x")
    assert titles(notebook, "gloo") == []
    assert titles(notebook, "nccl") == ["Collectives"]


@pytest.mark.parametrize("q", [
    '"unbalanced', "OR", "pipeline OR", "OR pipeline", "AND", "pipeline NOT gpipe",
    "-gpipe", "***", "tag:", "from:yesterday", "to:2024-13-01", "week:2024-13",
    "week:2024-W99", "week:2025-W53", "kind:letter", "x" * 501, "(", ")", "'", "- -",
    "title:pipeline", "col:umn",
])
def test_malformed_queries_give_a_clear_message(notebook, q):
    with pytest.raises(errors.BadQuery) as caught, notebook.read() as session:
        search.search(session, q)
    assert str(caught.value)


@pytest.mark.parametrize("q", ["a:b", "http://x.test/a", "10:30", '"title:pipeline"', "^x", "a+b",
                               "*pipeline", "{x}", "pipeline*", "NEAR(a b)"])
def test_odd_but_harmless_queries_run(notebook, q):
    with notebook.read() as session:
        search.search(session, q)  # no exception is the assertion: these are plain words


def test_empty_query_returns_nothing(notebook):
    assert titles(notebook, "   ") == []


def test_an_unknown_filter_is_named_not_searched_for(notebook):
    with pytest.raises(errors.BadQuery) as caught, notebook.read() as session:
        search.search(session, "title:pipeline")
    assert "title: is not a filter" in str(caught.value) and "tag:" in str(caught.value)


def test_repeated_words_are_asked_once():
    assert search.parse(" OR ".join(["a*"] * 83)).terms == ['"a"*']
    assert search.parse("x x y OR y x OR x y").terms == ['"x"', '"y"', "OR", '"y"', '"x"']
    assert search.parse("x -y x -y").terms == ['"x"', 'NOT "y"']


@pytest.mark.parametrize("q, limit", [
    (" ".join(f"w{i}" for i in range(17)), "at most 16 words"),
    (" ".join(f"w{i}*" for i in range(5)), "at most 4 words ending in *"),
    (" OR ".join(f"w{i}" for i in range(9)), "at most 8 alternatives"),
])
def test_a_search_too_large_names_its_limit(notebook, q, limit):
    with pytest.raises(errors.BadQuery) as caught, notebook.read() as session:
        search.search(session, q)
    assert limit in str(caught.value)


def test_a_search_past_its_time_is_stopped_and_says_so(notebook):
    with notebook.write() as session:
        for i in range(200):
            entries.create(session, author="x", date="2024-05-01", title=f"Word {i}",
                           body=f"word{i} words wordy " * 20, tags=[])
    with pytest.raises(search_budget.TooSlow) as caught, notebook.read() as session:
        search.search(session, "word*", seconds=1e-9)
    assert "longer than 1e-09 s" in str(caught.value) and caught.value.status == 422
    with notebook.read() as session:  # the connection is usable again, and unlimited
        assert len(search.search(session, "word*", seconds=None).hits) == 20


def test_a_statement_run_straight_on_sqlite_past_the_time_is_stopped_too(notebook):
    """db.Prepared runs on the sqlite3 connection itself, whose interrupt is sqlite3's own
    error, not SQLAlchemy's: it is TooSlow all the same, never a 500."""
    with notebook.write() as session:
        for i in range(50):
            entries.create(session, author="x", date="2024-05-01", title=f"Word {i}",
                           body="word " * 50, tags=[])
    with pytest.raises(search_budget.TooSlow), notebook.read() as session:
        with search_budget.time_limit(session, 1e-9):
            search.HITS.run(session, {"ids": list(range(1, 51))})


def test_a_connection_closed_under_the_time_limit_is_let_go_quietly(notebook):
    """A connection the pool closed while the limit was on (an overflow connection given
    back) has no handler left to clear: leaving the limit must not fail on it."""
    with notebook.read() as session:
        with search_budget.time_limit(session, 5):
            session.connection().connection.dbapi_connection.close()
        session.invalidate()


def test_the_web_answers_a_search_past_its_time_with_422(make_app):
    app = make_app(SEARCH_TIME_LIMIT_S=1e-9)
    client = app.test_client()
    for i in range(200):
        client.post("/api/v1/entries", json={"title": f"Word {i}", "body": "word words " * 40})
    answer = client.get("/api/v1/search?q=word*")
    assert answer.status_code == 422 and answer.get_json()["error"]["code"] == "too_slow"
    page = client.get("/search?q=word*")
    assert page.status_code == 400 and "took longer than" in page.text
    assert client.get("/api/v1/search?q=" + " OR ".join(["a*"] * 83)).status_code == 200
    assert client.get("/api/v1/entries?q=" + "%20".join(f"w{i}*" for i in range(5))) \
        .status_code == 400


def test_a_caller_has_two_searches_running_at_most(served):
    """Two searches of the viewer's are running (their slots taken as a request would):
    a third is 429 at once with Retry-After, while the owner still searches."""
    searches = served.app.extensions["searches"]
    assert searches.take(VIEWER) and searches.take(VIEWER)
    viewer, owner = served.as_user(VIEWER), served.as_user(OWNER)
    try:
        for path in ("/api/v1/search?q=x", "/search?q=x", "/api/v1/entries?q=x"):
            answer = viewer("get", path)
            assert answer.status_code == 429 and answer.headers["Retry-After"] == "5", path
        assert viewer("get", "/api/v1/entries").status_code == 200  # no words: no search
        assert owner("get", "/api/v1/search?q=x").status_code == 200
    finally:
        searches.give_back(VIEWER)
        searches.give_back(VIEWER)
    assert viewer("get", "/api/v1/search?q=x").status_code == 200


def test_a_note_too_long_for_a_snippet_shows_its_lead(notebook):
    """snippet() is quadratic in a text's matches: a text past SNIPPET_MAX_CHARS is shown
    by its lead, so a note of 40,000 "`a " costs a search for a* nothing."""
    with notebook.write() as session:
        entries.create(session, author="x", date="2024-05-05", title="Code",
                       body="`a " * 40_000, tags=[])
    with notebook.read() as session:
        hits = {h.entry.title: h for h in search.search(session, "a*", seconds=5).hits}
    code = hits["Code"].snippet_html
    assert code and "<mark>" not in code  # the lead, not a snippet
    assert "<mark>" in hits["Reading list"].snippet_html  # a short one keeps its snippet
