"""`cpl runs` against a real `commonplace web` (gunicorn) on a notebook whose runs finished
as a runner's do (tests/app/journal/test_trends.py's `finished`): an experiment no one
has is an error, not an empty list; a run's card says what its web card says of the runs
before it, in the server's words, and no line ends in blanks."""

from __future__ import annotations

import re
from html import escape

import pytest

from tests.app.journal.test_trends import SMALL, collectives_result, finished
from tests.app.journal.test_week_changes import weeks_ago
from tests.client_helpers import Terminal
from tests.tailnet import WebServer

WIDE = {"COLUMNS": "200"}  # lines of the card unfolded, to compare with the server's
ESCAPE_RE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@pytest.fixture
def web(db, data_dir):
    server = WebServer(data_dir, COMMONPLACE_AUTH="dev")
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def cpl(web, tmp_path) -> Terminal:
    return Terminal(tmp_path / "home", web.base)


def test_an_unknown_experiment_is_an_error_and_a_known_one_without_runs_is_not(
        db, client, cpl):
    run_id = finished(db, "collectives", SMALL, collectives_result(40e9))
    unknown = cpl("runs", "--experiment", "nope")
    assert unknown.rc == 4, unknown.err  # not found
    assert "no experiment 'nope'" in unknown.err and "collectives" in unknown.err
    assert unknown.out == ""
    typo = cpl("runs", "-e", "colectives")
    assert typo.rc == 4 and "did you mean collectives?" in typo.err
    empty = cpl("runs", "-e", "pipeline")  # in the catalogue, never run
    assert (empty.rc, empty.out, empty.err.strip()) == (0, "", "no runs")
    listed = cpl("runs", "-e", "collectives")
    assert listed.rc == 0 and listed.out.split("\t")[0] == str(run_id)
    # the API and the page refuse it the same way
    answer = client.get("/api/v1/runs?experiment=nope")
    assert answer.status_code == 422
    assert answer.get_json()["error"]["field"] == "experiment"
    page = client.get("/runs?experiment=nope")
    assert page.status_code == 400 and "no experiment" in page.text


def test_a_runs_card_says_what_changed_since_the_run_before_as_the_web_card(
        db, client, cpl):
    before = finished(db, "collectives", SMALL, collectives_result(40e9), at=weeks_ago(1))
    run_id = finished(db, "collectives", SMALL, collectives_result(30e9))
    since = client.get(f"/api/v1/runs/{run_id}").get_json()["since"]
    assert since["previous"] == before and since["lines"]
    assert any(line["regression"] for line in since["lines"])
    card = client.get(f"/runs/{run_id}").text
    shown = cpl("runs", "show", str(run_id), env=WIDE)
    assert shown.rc == 0, shown.err
    assert f"Since run {before} (the trend: {cpl.server}/trends/" in shown.out
    for line in since["lines"]:
        assert line["text"] in shown.out
        assert escape(line["text"]).replace(  # the card's own words
            f"(#{before})", f'(<a href="/runs/{before}">#{before}</a>)') in card
    assert "Regression: all_reduce" in shown.out
    first = cpl("runs", "show", str(before), env=WIDE)
    assert "The first successful run of these parameters" in first.out
    for done in (shown, cpl.on_pty("runs", "show", str(run_id))):
        lines = ESCAPE_RE.sub("", done.out).splitlines()
        assert lines and [n for n in lines if n != n.rstrip()] == []
