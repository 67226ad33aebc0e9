"""Task boxes ticked from the rendered page: numbered by the renderer (and only there), found
in the markdown outside fenced code, saved as a revision made from the revision the page
showed (so a stale page merges like any edit), and every bad tick refused with a 4xx that
changes nothing."""

from __future__ import annotations

import re

import pytest

from app.errors import Invalid
from app.models import Revision
from app.notebook import render, tasks
from tests.helpers import OWNER, THIS_WEEK, Elements, count, create_entry, edit_entry, post_forms
from tests.strict_pages import assert_strict_page

TODO = "Plan:\n\n- [ ] measure the ring\n- [x] read the paper\n\n```\n- [ ] not a task\n```\n\n" \
       "1. [ ] ordered too\n    - [ ] and nested"


def api_body(client, entry_id: int) -> str:
    return client.get(f"/api/v1/entries/{entry_id}").get_json()["body"]


def boxes_on(html: str) -> list[dict]:
    return [attrs for attrs, _ in Elements(html).all("button", "task-box")]


# -- the text and the render agree ---------------------------------------------------------


def test_boxes_are_found_outside_fenced_code():
    assert [ticked for _, ticked in tasks.boxes(TODO)] == [False, True, False, False]
    assert render.render(TODO).tasks == [False, True, False, False]


def test_set_box_ticks_and_unticks_one_line():
    ticked = tasks.set_box(TODO, 2, True)
    assert "1. [x] ordered too" in ticked and ticked.count("[x]") == 2
    assert tasks.set_box(ticked, 2, False) == TODO
    assert tasks.set_box(TODO, 1, True) == TODO  # already ticked: the same text
    with pytest.raises(Invalid):
        tasks.set_box(TODO, 4, True)


def test_the_renderer_numbers_its_boxes_and_user_html_cannot_pose_as_one():
    html = render.render('- [ ] real\n\n<input type="checkbox" data-task="0" '
                         'data-cp-ref="x:x:0" checked>').html
    inputs = [attrs for attrs, _ in Elements(html).all("input")]
    assert inputs[0]["data-task"] == "0"
    assert "data-task" not in inputs[1] and "data-cp-ref" not in inputs[1]
    assert all(attrs.get("disabled") == "" for attrs in inputs)


# -- the page ------------------------------------------------------------------------------


def test_an_owner_ticks_boxes_on_the_page_without_script(client, db):
    entry_id = create_entry(client, title="Todo", body=TODO)
    page = client.get(f"/entries/{entry_id}/todo")
    assert_strict_page(page)
    boxes = boxes_on(page.text)
    assert [b["aria-checked"] for b in boxes] == ["false", "true", "false", "false"]
    assert boxes[2]["formaction"] == f"/entries/{entry_id}/tasks/2"
    assert boxes[2]["form"] == f"ticks-{entry_id}" and boxes[2]["value"] == "1"
    form = next(f for f in post_forms(page.text) if f.get("id") == f"ticks-{entry_id}")
    assert 'name="base_revision" value="1"' in page.text and form is not None

    response = client.post(f"/entries/{entry_id}/tasks/2", data={"base_revision": "1",
                                                                 "done": "1"})
    assert response.status_code == 303
    assert response.location == f"/entries/{entry_id}/todo#task-{entry_id}-2"
    assert "1. [x] ordered too" in api_body(client, entry_id)
    assert count(db, Revision, Revision.entry_id == entry_id) == 2
    assert [b["aria-checked"] for b in boxes_on(client.get(response.location).text)] == [
        "false", "true", "true", "false"]


def test_boxes_post_under_the_notebooks_mount_point(client):
    entry_id = create_entry(client, title="Todo", body=TODO)
    page = client.get(f"/entries/{entry_id}/todo", base_url="http://localhost/nb").text
    assert boxes_on(page)[2]["formaction"] == f"/nb/entries/{entry_id}/tasks/2"
    assert f'action="/nb/entries/{entry_id}/tasks/0"' in page  # the form they belong to


def test_script_ticks_get_json_and_tick_from_the_revision_they_were_shown(client, db):
    entry_id = create_entry(client, title="Todo", body=TODO)
    answer = client.post(f"/entries/{entry_id}/tasks/0", data={"base_revision": "1",
                         "done": "1"}, headers={"Accept": "application/json"}).get_json()
    assert answer == {"entry_id": entry_id, "task": 0, "done": True, "revision": 2,
                      "merged": False}
    again = client.post(f"/entries/{entry_id}/tasks/0", data={"base_revision": "2",
                        "done": "1"}, headers={"Accept": "application/json"}).get_json()
    assert again["revision"] == 2  # the same tick twice makes no empty revision
    assert count(db, Revision, Revision.entry_id == entry_id) == 2


def test_a_tick_from_a_stale_page_merges_with_the_save_made_meanwhile(client):
    entry_id = create_entry(client, title="Todo", body=TODO)
    edit_entry(client, entry_id, 1, title="Todo", body="Intro.\n\n" + TODO)  # revision 2
    response = client.post(f"/entries/{entry_id}/tasks/0", data={"base_revision": "1",
                           "done": "1"}, headers={"Accept": "application/json"})
    assert response.status_code == 200 and response.get_json()["merged"] is True
    body = api_body(client, entry_id)
    assert body.startswith("Intro.") and "- [x] measure the ring" in body


def test_a_tick_on_a_line_changed_meanwhile_shows_the_merge_page(client, db):
    entry_id = create_entry(client, title="Todo", body=TODO)
    edit_entry(client, entry_id, 1, title="Todo",
               body=TODO.replace("measure the ring", "measure the tree"))
    response = client.post(f"/entries/{entry_id}/tasks/0", data={"base_revision": "1",
                                                                 "done": "1"})
    assert response.status_code == 409
    assert_strict_page(response)
    assert "measure the tree" in api_body(client, entry_id)
    assert count(db, Revision, Revision.entry_id == entry_id) == 2


@pytest.mark.parametrize("index,data,field", [
    (0, {"base_revision": "1"}, "done"),
    (0, {"base_revision": "1", "done": "yes"}, "done"),
    (0, {"done": "1"}, "base_revision"),
    (0, {"base_revision": "7", "done": "1"}, "base_revision"),
    (4, {"base_revision": "1", "done": "1"}, "task"),
    (99999, {"base_revision": "1", "done": "1"}, "task"),
])
def test_bad_ticks_are_refused_and_change_nothing(client, db, index, data, field):
    entry_id = create_entry(client, title="Todo", body=TODO)
    response = client.post(f"/entries/{entry_id}/tasks/{index}", data=data,
                           headers={"Accept": "application/json"})
    assert response.status_code == 422
    assert field in response.text
    assert api_body(client, entry_id) == TODO
    assert count(db, Revision) == 1


def test_boxes_the_text_scan_cannot_place_are_refused_not_guessed(client, db):
    body = "<ul><li>raw</li></ul>\n\n    - [ ] indented code\n\n- [ ] real"
    entry_id = create_entry(client, title="Odd", body=body)
    assert len(boxes_on(client.get(f"/entries/{entry_id}/odd").text)) == 1
    response = client.post(f"/entries/{entry_id}/tasks/0", data={"base_revision": "1",
                                                                 "done": "1"})
    assert response.status_code == 422 and "editor" in response.text
    assert api_body(client, entry_id) == body


def test_no_entry_no_tick(client):
    assert client.post("/entries/999/tasks/0", data={"base_revision": "1",
                                                     "done": "1"}).status_code == 404


def test_the_letter_ticks_on_its_page_and_on_home(client):
    letter = client.get(f"/api/v1/weeks/{THIS_WEEK}").get_json()["letter"]
    client.put(f"/api/v1/entries/{letter['id']}", json={
        "base_revision": letter["revision"], "body": "## Next\n\n- [ ] write the letter"})
    home = client.get("/").text
    assert len(boxes_on(home)) == 1 and 'name="next" value="/"' in home
    response = client.post(f"/entries/{letter['id']}/tasks/0",
                           data={"base_revision": "2", "done": "1", "next": "/"})
    assert response.location == f"/#task-{letter['id']}-0"
    assert len(boxes_on(client.get(letter["url"]).text)) == 1
    elsewhere = client.post(f"/entries/{letter['id']}/tasks/0", data={
        "base_revision": "3", "done": "0", "next": "https://example.com/"})
    assert elsewhere.location.startswith(letter["url"])  # never off the notebook


def test_viewers_see_boxes_but_cannot_tick(served):
    owner, viewer = served.as_user(OWNER), served.as_user("viewer@example.com")
    made = owner("post", "/api/v1/entries", json={"title": "Todo", "body": TODO}).get_json()
    page = viewer("get", made["url"]).text
    assert boxes_on(page) == [] and "data-tick-form" not in page
    assert len(re.findall(r'<input[^>]*data-task="\d"[^>]*disabled', page)) == 4
    refused = viewer("post", f"/entries/{made['id']}/tasks/0",
                     data={"base_revision": "1", "done": "1"})
    assert refused.status_code == 403
