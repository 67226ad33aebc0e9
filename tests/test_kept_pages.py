"""Pages kept between views (app/web/pages/kept.py): home, the letter, the site map and tag
pages are answered from the last rendering while nothing changed, and never once anything
did - a save through the web, a write by another process, another reader, another URL,
another day."""

from __future__ import annotations

import sqlite3

from tests.helpers import OWNER, VIEWER, create_entry, edit_entry, entry_form

KEPT = ("/", "/weeks/2024-W13", "/sitemap?year=2024", "/tags/gpu")


def test_a_kept_page_is_answered_again_until_the_notebook_changes(client, db):
    entry_id = create_entry(client, title="First title")
    first = {path: client.get(path).text for path in KEPT}
    for path in KEPT:
        assert "First title" in first[path], path
        assert client.get(path).text == first[path], path  # kept: the very same page
    assert edit_entry(client, entry_id, 1, title="Second title").status_code == 303
    for path in KEPT:
        page = client.get(path).text
        assert "Second title" in page and "First title" not in page, path


def test_a_write_by_another_process_shows_on_the_next_view(client, db):
    """The CLI, an import or the scheduler write through connections of their own: SQLite's
    data_version moves for every other connection."""
    entry_id = create_entry(client, title="Before")
    for path in KEPT:
        assert "Before" in client.get(path).text
    path = db.sqlite_path
    with sqlite3.connect(path) as other:  # not the app's pool: as another process writes
        other.execute("UPDATE entry SET title = 'After' WHERE id = ?", (entry_id,))
    for path in KEPT:
        page = client.get(path).text
        assert "After" in page and "Before" not in page, path


def test_each_reader_and_each_url_has_its_own_page(served):
    owner, viewer = served.as_user(OWNER), served.as_user(VIEWER)
    owner("post", "/entries/new", data=entry_form(title="Secret plan", status="draft"))
    owner("post", "/entries/new", data=entry_form(title="Public note"))
    for path in KEPT:  # the owner first, so a kept page would be the owner's
        assert "Secret plan" in owner("get", path).text, path
        page = viewer("get", path).text
        assert "Public note" in page and "Secret plan" not in page, path
        assert "Secret plan" in owner("get", path).text, path
    for n in range(60):
        owner("post", "/entries/new", data=entry_form(title=f"Note {n:02}"))
    newest, older = owner("get", "/tags/gpu").text, owner("get", "/tags/gpu?offset=50").text
    assert "Note 59" in newest and "Note 59" not in older and "Public note" in older


def test_a_new_day_renders_afresh(make_app):
    """The key holds the owner's day: the same instant is a different date on either side
    of the date line, and home offers to save for that date."""
    app = make_app(TIMEZONE="Pacific/Kiritimati")  # UTC+14
    client = app.test_client()
    east = client.get("/").text
    app.config["TIMEZONE"] = "Pacific/Pago_Pago"  # UTC-11: always another date
    west = client.get("/").text
    assert east != west
    assert east.split("Save for ")[1][:20] != west.split("Save for ")[1][:20]


def test_a_missing_page_and_a_bad_request_are_not_kept(client):
    assert client.get("/tags/nothing-here").status_code == 404
    create_entry(client, tags="nothing-here")
    assert client.get("/tags/nothing-here").status_code == 200
    assert client.get("/sitemap?year=20x4").status_code == 400
    assert client.get("/weeks/2024-W99").status_code == 404
