"""Search: bm25 ranking with title and tags above body, snippets, the query language."""

import pytest

from app import errors
from app.notebook import entries, letters, search


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
    "kind:letter", "x" * 501, "(", ")", "'", "- -",
])
def test_malformed_queries_give_a_clear_message(notebook, q):
    with pytest.raises(errors.BadQuery) as caught, notebook.read() as session:
        search.search(session, q)
    assert str(caught.value)


@pytest.mark.parametrize("q", ["a:b", "col:umn", "title:pipeline", "^x", "a+b",
                               "*pipeline", "{x}", "pipeline*", "NEAR(a b)"])
def test_odd_but_harmless_queries_run(notebook, q):
    with notebook.read() as session:
        search.search(session, q)  # no exception is the assertion: these are plain words


def test_empty_query_returns_nothing(notebook):
    assert titles(notebook, "   ") == []
