"""Writing through the notebook's pages: create, edit and delete; forms that keep what was
typed when they fail; stale edits that get a merge view instead of overwriting; history,
diffs and restores."""

from __future__ import annotations

import html
import re

import pytest

from app.models import Entry, Revision
from app.notebook import entries, letters
from tests.helpers import THIS_WEEK, count, create_entry, edit_entry, entry_form, load
from tests.strict_pages import assert_strict_page

# -- create / edit / delete ---------------------------------------------------------------


def test_create_edit_delete_flow(client, db):
    entry_id = create_entry(client, title="Draft idea", body="first", status="draft")
    assert "draft" in client.get(f"/entries/{entry_id}/draft-idea").text
    response = edit_entry(client, entry_id, 1, title="Published idea", body="second",
                          status="published")
    assert response.status_code == 303
    assert response.location == f"/entries/{entry_id}/published-idea"
    entry = load(db, Entry, entry_id)
    assert (entry.revision, entry.body_md, entry.status) == (2, "second", "published")

    confirm = client.get(f"/entries/{entry_id}/delete")
    assert "Delete for good" in confirm.text and 'name="base_revision" value="2"' in confirm.text
    response = client.post(f"/entries/{entry_id}/delete", data={"base_revision": "2"})
    assert response.status_code == 303 and response.location == "/"
    assert load(db, Entry, entry_id) is None
    assert client.get(f"/entries/{entry_id}").status_code == 404


BAD_FIELDS = [
    ({"title": ""}, "title", "title is required"),
    ({"title": "   "}, "title", "title is required"),
    ({"title": "x" * 201}, "title", "longer than 200"),
    ({"date": "27/03/2024"}, "date", "YYYY-MM-DD"),
    ({"date": "2024-02-30"}, "date", "not a calendar date"),
    ({"tags": "ok 9bad"}, "tags", "starting with a letter"),
    ({"tags": "<script>"}, "tags", "starting with a letter"),
    ({"status": "secret"}, "status", "draft"),
    ({"body": "y" * (entries.MAX_BODY + 1)}, "body", "longer than"),
]


@pytest.mark.parametrize(("fields", "name", "message"), BAD_FIELDS)
def test_a_failed_create_keeps_the_typed_text(client, db, fields, name, message):
    typed = "My long careful paragraph, with <angle> & ampersand."
    data = entry_form(**{"body": typed, **fields})
    if name == "body":
        typed = data["body"]
    response = client.post("/entries/new", data=data)
    assert response.status_code == 422
    assert count(db, Entry) == 0
    page = response.text
    assert f'id="{name}-error"' in page and message in page
    assert 'aria-invalid="true"' in page
    if name != "body":
        assert "My long careful paragraph, with &lt;angle&gt; &amp; ampersand." in page
        assert 'value="gpu pipeline"' in page or name == "tags"
    else:
        assert typed[:1000] in page
    assert_strict_page(response)


@pytest.mark.parametrize(("fields", "name", "message"), BAD_FIELDS[:6])
def test_a_failed_edit_keeps_the_typed_text_and_changes_nothing(client, db, fields, name, message):
    entry_id = create_entry(client, body="saved text")
    response = edit_entry(client, entry_id, 1, body="edited but not saved", **fields)
    assert response.status_code == 422
    assert "edited but not saved" in response.text and message in response.text
    assert 'name="base_revision" value="1"' in response.text
    entry = load(db, Entry, entry_id)
    assert (entry.revision, entry.body_md) == (1, "saved text")


@pytest.mark.parametrize("base", ["", "abc", "-1", "1.5", "99999999999"])
def test_a_bad_base_revision_is_refused(client, db, base):
    entry_id = create_entry(client, body="saved text")
    response = edit_entry(client, entry_id, base, body="new text")
    assert response.status_code == 422
    assert "base_revision" in response.text
    assert load(db, Entry, entry_id).body_md == "saved text"
    response = client.post(f"/entries/{entry_id}/delete", data={"base_revision": base})
    assert response.status_code == 422
    assert load(db, Entry, entry_id) is not None


@pytest.mark.parametrize(("method", "path"), [
    ("get", "/entries/999/no-slug"), ("get", "/entries/999/edit"), ("post", "/entries/999/edit"),
    ("get", "/entries/999/delete"), ("post", "/entries/999/delete"),
    ("get", "/entries/999/history"), ("get", "/entries/999/diff?a=1&b=1"),
    ("post", "/entries/999/restore"), ("get", "/tags/nothing-here"),
])
def test_unknown_ids_are_404(client, method, path):
    data = {**entry_form(), "base_revision": "1", "revision": "1"} if method == "post" else None
    response = getattr(client, method)(path, data=data)
    assert response.status_code == 404
    assert_strict_page(response)


def test_a_letter_cannot_leave_its_week(client, db):
    client.get("/")
    with db.read() as session:
        letter = letters.find_letter(session, THIS_WEEK)
    response = edit_entry(client, letter.id, letter.revision, title=letter.title, date="2001-01-01",
                    body="kept", tags="")
    assert response.status_code == 422
    assert "within its week" in response.text and "kept" in response.text


# -- conflicts ----------------------------------------------------------------------------


def test_two_devices_editing_different_lines_merge_by_themselves(client, db):
    entry_id = create_entry(client, title="Shared", body="line one\nline two\nline three")
    phone = client.get(f"/entries/{entry_id}/edit").text
    laptop = client.get(f"/entries/{entry_id}/edit").text
    assert 'name="base_revision" value="1"' in phone and 'name="base_revision" value="1"' in laptop

    assert edit_entry(client, entry_id, 1, title="Shared",
                      body="line one\nline two (laptop)\nline three").status_code == 303
    response = edit_entry(client, entry_id, 1, title="Shared",
                          body="line one\nline two\nline three\nphone's <new> line")
    assert response.status_code == 303  # saved: the two changes touch different lines
    assert response.headers["Location"].endswith("?merged=2&base=1")
    entry = load(db, Entry, entry_id)
    assert (entry.revision, entry.body_md) == (
        3, "line one\nline two (laptop)\nline three\nphone's <new> line")
    assert count(db, Entry) == 1  # no "conflict copy"
    history = client.get(f"/entries/{entry_id}/history").text
    assert "merged with revision 2" in history


def test_two_devices_changing_the_same_line_get_a_merge_view_that_loses_nothing(client, db):
    entry_id = create_entry(client, title="Shared", body="line one\nline two\nline three")
    assert edit_entry(client, entry_id, 1, title="Shared",
                      body="line one\nline two (laptop)\nline three").status_code == 303
    response = edit_entry(client, entry_id, 1, title="Shared",
                          body="line one\nline two, phone's <new> words\nline three\nend")
    assert response.status_code == 409
    page = response.text
    assert_strict_page(response)
    assert "Not saved" in page and "nothing was overwritten" in page
    assert "line two (laptop)" in page  # the current text
    assert "phone&#39;s &lt;new&gt; words" in page or "phone's &lt;new&gt; words" in page
    assert 'name="base_revision" value="2"' in page  # the merge saves on top of the current
    # the offer keeps both versions of line two, and the phone's line that merged cleanly
    assert re.search(r'<textarea id="f-body" name="body"[^>]*>line one\nline two \(laptop\)\n'
                     r"line two, phone.{1,6}s &lt;new&gt; words\nline three\nend</textarea>", page)
    assert '<tr class="add">' in page and '<tr class="del">' in page
    assert "Line 2" in page and "What changed elsewhere since revision 1" in page
    entry = load(db, Entry, entry_id)
    assert (entry.revision, entry.body_md) == (2, "line one\nline two (laptop)\nline three")
    assert count(db, Entry) == 1  # no "conflict copy"

    offered = re.search(r'<textarea id="f-body" name="body"[^>]*>(.*?)</textarea>', page, re.S)
    saved_as_offered = html.unescape(offered[1])
    assert edit_entry(client, entry_id, 2, title="Shared", body=saved_as_offered).status_code == 303
    entry = load(db, Entry, entry_id)
    assert entry.revision == 3
    assert "line two (laptop)" in entry.body_md and "phone's <new> words" in entry.body_md
    assert entry.body_md.endswith("line three\nend")


def test_the_merge_view_compares_lines_as_browsers_send_them(client):
    entry_id = create_entry(client, body="same first line\nsecond")
    edit_entry(client, entry_id, 1, body="same first line\nsecond, laptop")
    response = edit_entry(client, entry_id, 1, body="same first line\r\nsecond, phone")  # CRLF
    assert response.status_code == 409
    mine = response.text.split("What changed elsewhere")[0]  # not the base → current diff
    rows = re.findall(r'<tr class="(\w+)">.*?<td class="code">(.*?)</td>', mine, re.S)
    assert [kind for kind, _ in rows if kind != "skip"] == ["same", "del", "add"]
    assert "<del>laptop</del>" in rows[1][1] and "<ins>phone</ins>" in rows[2][1]


def test_deleting_a_changed_entry_asks_again(client, db):
    entry_id = create_entry(client)
    edit_entry(client, entry_id, 1, body="newer")
    response = client.post(f"/entries/{entry_id}/delete", data={"base_revision": "1"})
    assert response.status_code == 409
    assert "Nothing was deleted" in response.text
    assert 'name="base_revision" value="2"' in response.text
    assert load(db, Entry, entry_id) is not None


# -- history ------------------------------------------------------------------------------


def test_history_diff_and_restore(client, db):
    entry_id = create_entry(client, title="Evolving", body="alpha\nbeta\ngamma")
    edit_entry(client, entry_id, 1, title="Evolving", body="alpha\nbeta changed\ngamma")
    edit_entry(client, entry_id, 2, title="Evolved", body="alpha\nbeta changed\ngamma\ndelta")

    history = client.get(f"/entries/{entry_id}/history").text
    for number in (1, 2, 3):
        assert f'name="a" value="{number}"' in history
    assert "owner@localhost" in history
    assert f'action="/entries/{entry_id}/diff"' in history

    diff = client.get(f"/entries/{entry_id}/diff?a=1&b=2").text
    assert "beta<ins> changed</ins>" in diff
    assert '<tr class="del">' in diff and '<tr class="add">' in diff
    swapped = client.get(f"/entries/{entry_id}/diff?a=3&b=1").text
    assert "revision 1 → 3" in swapped
    assert "Evolving" in swapped and "Evolved" in swapped  # the title change

    response = client.post(f"/entries/{entry_id}/restore",
                           data={"revision": "1", "base_revision": "3"})
    assert response.status_code == 303
    entry = load(db, Entry, entry_id)
    assert (entry.revision, entry.title, entry.body_md) == (4, "Evolving", "alpha\nbeta\ngamma")
    assert "restored revision 1" in client.get(f"/entries/{entry_id}/history").text
    assert count(db, Revision) == 4


def test_restore_with_a_stale_base_changes_nothing(client, db):
    entry_id = create_entry(client, body="one")
    edit_entry(client, entry_id, 1, body="two")
    response = client.post(f"/entries/{entry_id}/restore",
                           data={"revision": "1", "base_revision": "1"})
    assert response.status_code == 409
    assert load(db, Entry, entry_id).body_md == "two"
    for data in ({"revision": "x", "base_revision": "2"}, {"revision": "1"},
                 {"revision": "77", "base_revision": "2"}):
        assert client.post(f"/entries/{entry_id}/restore", data=data).status_code in (404, 422)
    assert load(db, Entry, entry_id).revision == 2


def test_diff_escapes_everything(client):
    entry_id = create_entry(client, body="safe")
    edit_entry(client, entry_id, 1, body='<script>alert("x")</script>\n<img src=x onerror=y>')
    response = client.get(f"/entries/{entry_id}/diff?a=1&b=2")
    assert "&lt;script&gt;" in response.text
    assert_strict_page(response)


@pytest.mark.parametrize(("query", "status"), [
    ("a=1", 400), ("a=x&b=1", 400), ("a=1&b=-2", 400), ("a=1&b=42", 404),
])
def test_diff_bad_arguments(client, query, status):
    entry_id = create_entry(client)
    assert client.get(f"/entries/{entry_id}/diff?{query}").status_code == status
