"""Three-way merge on save: a save from an older revision combines with what was saved
meanwhile when the two touch different lines, and only overlapping changes reach the owner
(the merge page, or a 409 with the conflicting hunks and an offer that keeps both sides).
The card a finishing run posts into the letter never conflicts with the owner's editor."""

import datetime as dt

import pytest

from app.journal import posting, runs
from app.models import Entry, Revision
from app.notebook import merge
from tests.helpers import SMALL, count, edit_entry, load

LETTER = "## Notes\n\n## Experiments\n\n## Reading\n\n## Next"


@pytest.mark.parametrize("base, theirs, mine, text, conflicts", [
    ("a\nb\nc", "a\nb\nc", "a\nB\nc", "a\nB\nc", 0),  # only mine changed
    ("a\nb\nc", "A\nb\nc", "a\nb\nc", "A\nb\nc", 0),  # only theirs changed
    ("a\nb\nc", "A\nb\nc", "a\nb\nC", "A\nb\nC", 0),  # different lines
    ("a\nb\nc\nd", "A\nb\nc\nd", "a\nB\nc\nd", "A\nB\nc\nd", 0),  # neighbouring lines
    ("a\nb", "a\nb\nc", "a\nb\nd", "a\nb\nc\nd", 0),  # both append at the end: both kept
    ("a\nb\nc", "a\nX\nc", "a\nX\nc", "a\nX\nc", 0),  # the same change twice
    ("a\nb\nc", "a\nB1\nc", "a\nB2\nc", "a\nB1\nB2\nc", 1),  # the same line, differently
    ("a\nb\nc", "a\nc", "a\nB\nc", "a\nB\nc", 1),  # deleted there, edited here
    ("", "x", "y", "x\ny", 0),
    (LETTER, LETTER.replace("## Reading", "```run\nid: 5\n```\n\n## Reading"),
     LETTER.replace("## Notes\n", "## Notes\n\nwords of mine\n"),
     "## Notes\n\nwords of mine\n\n## Experiments\n\n```run\nid: 5\n```\n\n## Reading\n\n"
     "## Next", 0),
])
def test_line_merge(base, theirs, mine, text, conflicts):
    merged = merge.merge(base, theirs, mine)
    assert len(merged.conflicts) == conflicts
    if conflicts == 0:
        assert merged.text == text
    else:  # the offer keeps every line either side wrote
        for line in (theirs + "\n" + mine).split("\n"):
            assert line in merged.text.split("\n")


def test_fields_merge_whole_and_conflict_only_when_both_changed_them():
    base = {"title": "T", "body": "b", "tags": ["x"], "status": "published", "date": "2024-01-01"}
    theirs = {**base, "title": "Their title"}
    merged, conflicts = merge.merge_fields(base, theirs, {**base, "tags": ["x", "y"]})
    assert merged == {"tags": ["x", "y"], "body": "b"} and conflicts == []
    merged, conflicts = merge.merge_fields(base, theirs, {**base, "title": "My title"})
    assert conflicts == [{"field": "title", "base": "T", "theirs": "Their title",
                          "mine": "My title"}]


def open_letter(client):
    letter = client.get("/api/v1/weeks/2024-W13")
    if letter.status_code == 404:
        client.post("/weeks/2024-W13/letter")
        letter = client.get("/api/v1/weeks/2024-W13")
    return letter.get_json()["letter"]


def finish_a_run(db) -> int:
    with db.write() as session:
        run = runs.create(session, "data_parallel", SMALL, actor="t")
        run.status, run.finished_at = "SUCCEEDED", dt.datetime(2024, 3, 27, 12)
        run.result = {"strategies": []}
        return run.id


def test_an_editor_open_on_the_letter_saves_over_a_posted_card_without_a_conflict(client, db):
    letter = open_letter(client)
    editing_from = letter["revision"]
    edit_page = client.get(f"/entries/{letter['id']}/edit").text
    assert f'name="base_revision" value="{editing_from}"' in edit_page
    run_id = finish_a_run(db)
    posting.post_cards(db, "UTC")  # the card arrives while the editor is open
    mine = letter["body"].replace("## Notes\n", "## Notes\n\nWrote this on the train.\n")
    response = edit_entry(client, letter["id"], editing_from, title=letter["title"],
                          date=letter["date"], body=mine)
    assert response.status_code == 303 and "merged=" in response.headers["Location"]
    saved = load(db, Entry, letter["id"])
    assert "Wrote this on the train." in saved.body_md and f"id: {run_id}" in saved.body_md
    assert saved.revision == editing_from + 2
    assert 'class="run-card' in saved.body_html  # the card still renders


def test_two_devices_in_two_sections_both_land_through_the_api(client, db):
    letter = open_letter(client)
    url, base = f"/api/v1/entries/{letter['id']}", letter["revision"]
    phone = letter["body"].replace("## Reading\n", "## Reading\n\nA paper on ZeRO.\n")
    laptop = letter["body"] + "\n\nRun the sweep."  # under ## Next, the last section
    assert client.put(url, json={"body": phone, "base_revision": base}).status_code == 200
    r = client.put(url, json={"body": laptop, "base_revision": base})
    assert r.status_code == 200 and r.get_json()["merged_with"] == base + 1
    body = r.get_json()["body"]
    assert "A paper on ZeRO." in body and "Run the sweep." in body
    assert count(db, Revision, Revision.entry_id == letter["id"]) == base + 2


def test_overlapping_api_saves_answer_the_hunks_and_an_offer_that_loses_nothing(client, db):
    created = client.post("/api/v1/entries", json={"title": "Plan", "body": "one\ntwo\nthree"})
    url = f"/api/v1/entries/{created.get_json()['id']}"
    client.put(url, json={"body": "one\ntwo (phone)\nthree", "base_revision": 1})
    r = client.put(url, json={"body": "one\ntwo (laptop)\nthree\nfour", "title": "Plan B",
                              "base_revision": 1})
    assert r.status_code == 409
    error = r.get_json()["error"]
    assert error["conflicts"] == [{"field": "body", "start": 2, "end": 3, "base": ["two"],
                                   "theirs": ["two (phone)"], "mine": ["two (laptop)"]}]
    assert error["offered"]["body"] == "one\ntwo (phone)\ntwo (laptop)\nthree\nfour"
    assert error["offered"]["title"] == "Plan B"
    assert client.get(url).get_json()["revision"] == 2  # nothing saved
    current = error["current"]["revision"]
    again = client.put(url, json={**error["offered"], "base_revision": current})
    assert again.status_code == 200 and again.get_json()["body"] == error["offered"]["body"]


def test_a_base_that_is_not_a_revision_is_a_plain_conflict_or_a_bad_input(client):
    created = client.post("/api/v1/entries", json={"title": "X", "body": "b"}).get_json()
    r = client.put(f"/api/v1/entries/{created['id']}", json={"body": "c", "base_revision": 0})
    assert r.status_code == 409 and "conflicts" not in r.get_json()["error"]
    # ahead of the entry, it is no edit that crossed another: the client's mistake
    r = client.put(f"/api/v1/entries/{created['id']}", json={"body": "c", "base_revision": 7})
    assert r.status_code == 422 and r.get_json()["error"]["field"] == "base_revision"
