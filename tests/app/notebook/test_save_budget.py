"""A save renders before it takes the write lock, under a budget of time and memory: a
note that renders too slowly (or not at all) is a 422 that names the limit or the
problem, changes nothing, and never holds up another writer or a runner's heartbeat.

Where the renderer learns to render an input here (the markdown pipeline's own fixes),
saving it is a 201: these tests hold either way, and never accept a 5xx."""

import threading

import pytest

from app.models import Entry
from app.notebook.render import isolated
from tests.helpers import SMALL, add_token, bearer, count

DEEP = ">" * 500 + " x"  # a RecursionError inside Python-Markdown
HEADINGS = "".join(f"# heading {i}\n" for i in range(40_000))  # ~490 kB, far past the budget


@pytest.mark.parametrize("body", [DEEP, ">" * 20_000 + " x"], ids=["in-process", "child"])
def test_a_note_nested_too_deeply_is_refused_on_save_and_preview(client, db, body):
    r = client.post("/api/v1/entries", json={"title": "Deep", "body": body})
    assert r.status_code in (201, 422), r.get_json()
    if r.status_code == 422:
        assert r.get_json()["error"]["field"] == "body"
        assert "nests too deeply" in r.get_json()["error"]["message"]
    assert count(db, Entry) == (r.status_code == 201)
    shown = client.post("/preview", data={"body": body})
    assert shown.status_code == (200 if r.status_code == 201 else 422)
    assert (b"nests too deeply" in shown.data) == (r.status_code == 422)


def test_an_edit_that_cannot_be_rendered_changes_nothing(client, db):
    made = client.post("/api/v1/entries", json={"title": "Fine", "body": "fine"}).get_json()
    r = client.put(f"/api/v1/entries/{made['id']}", json={"base_revision": 1, "body": DEEP})
    assert r.status_code in (200, 422)
    again = client.get(f"/api/v1/entries/{made['id']}").get_json()
    expected = (1, "fine") if r.status_code == 422 else (2, DEEP)
    assert (again["revision"], again["body"]) == expected


def test_a_slow_note_is_refused_while_other_writes_and_heartbeats_go_on(app, db):
    """The 400 kB note renders in a child process, which is stopped at the time limit;
    meanwhile another client saves entries and a runner heartbeats, without waiting for
    the lock (before, every one of them got 500 "database is locked")."""
    headers = bearer(add_token(db, "gpu1", "runner"))
    runner, owner = app.test_client(), app.test_client()
    assert runner.post("/api/v1/runner/register", json={"labels": {"gpu_count": 0}},
                       headers=headers).status_code == 200
    run_id = owner.post("/api/v1/runs", json={"experiment": "data_parallel",
                                               "params": SMALL}).get_json()["id"]
    epoch = runner.post("/api/v1/runner/lease", json={"wait": 0},
                        headers=headers).get_json()["run"]["epoch"]

    slow = {}

    def save_slow_note():
        slow["answer"] = app.test_client().post(
            "/api/v1/entries", json={"title": "Slow", "body": HEADINGS})

    saving = threading.Thread(target=save_slow_note)
    saving.start()
    during, statuses, n = 0, [], 0
    while saving.is_alive() or n < 3:
        n += 1
        made = owner.post("/api/v1/entries", json={"title": f"Other {n}", "body": "[[Slow]]"})
        beat = runner.post(f"/api/v1/runner/runs/{run_id}/heartbeat",
                           json={"epoch": epoch, "step": n}, headers=headers)
        statuses.append((made.status_code, beat.status_code))
        during += saving.is_alive()
    saving.join()
    assert set(statuses) == {(201, 200)}
    assert during >= 1  # writes went through while the slow note was being rendered
    answer = slow["answer"]
    assert answer.status_code in (201, 422), answer.get_json()
    if answer.status_code == 422:
        message = answer.get_json()["error"]["message"]
        assert f"longer than {isolated.TIME_LIMIT_S:g} s to render" in message
    assert count(db, Entry, Entry.title == "Slow") == (answer.status_code == 201)


def test_a_long_note_within_the_budget_renders_in_a_child_exactly_as_in_process(client, db):
    body = "\n\n".join(f"Paragraph {i} with a [[Link {i % 7}]] and #tag{i % 3}"
                       for i in range(600))
    assert len(body) > isolated.SMALL
    target = client.post("/api/v1/entries", json={"title": "Link 3", "body": "x"})
    assert target.status_code == 201
    made = client.post("/api/v1/entries", json={"title": "Long", "body": body})
    assert made.status_code == 201, made.get_json()
    html = made.get_json()["html"]
    assert f'class="wikilink" href="/entries/{target.get_json()["id"]}/link-3"' in html
    assert 'class="wikilink missing" href="/entries/new?title=Link%205"' in html
    from app.notebook import entries  # the in-lock renderer, for comparison

    with db.read() as session:
        assert entries.render_body(session, body).html == html
