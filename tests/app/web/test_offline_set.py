"""What the service worker is served and told to keep (app/web/pages/offline.py): the worker
at the origin's root, the offline page, and the offline set per reader. The worker itself
runs in Chromium in tests/browser/test_offline.py."""

from __future__ import annotations

import datetime as dt

from app.notebook import isoweeks
from tests.helpers import AS_OWNER, AS_VIEWER


def _make(call, title: str, date: dt.date, status: str = "published") -> dict:
    answer = call("post", "/api/v1/entries", json={"title": title, "date": date.isoformat(),
                                                   "status": status})
    assert answer.status_code == 201, answer.get_json()
    return answer.get_json()


def test_the_worker_is_served_from_the_root_and_always_revalidated(served):
    response = served.client.get("/sw.js", headers=AS_OWNER)
    assert response.status_code == 200
    assert response.mimetype == "text/javascript"
    assert response.headers["Cache-Control"] == "no-cache"
    assert "script-src 'self'" in response.headers["Content-Security-Policy"]
    assert b"addEventListener(\"fetch\"" in response.data
    # Its second half by the content-hashed URL: a change to it changes the worker's bytes.
    assert b'importScripts("/static/offline-writes.js?v=' in response.data


def test_every_page_loads_the_offline_script_and_says_whose_it_is(served):
    html = served.client.get("/", headers=AS_VIEWER).get_data(as_text=True)
    assert "/static/offline-page.js?v=" in html
    assert 'data-login="viewer@example.com"' in html


def test_the_offline_set_is_the_letters_the_recent_entries_and_the_site_map(served):
    owner, viewer = served.as_user("owner@example.com"), served.as_user("viewer@example.com")
    today = isoweeks.today("UTC")
    recent = _make(owner, "Recent", today - dt.timedelta(days=3))
    old = _make(owner, "Old", today - dt.timedelta(days=90))
    draft = _make(owner, "Draft", today, status="draft")
    this_week = owner("get", f"/api/v1/weeks/{isoweeks.iso_week(today)}").get_json()["letter"]

    answer = owner("get", "/offline/pages.json")
    assert answer.status_code == 200 and answer.headers["Cache-Control"] == "no-store"
    listing = answer.get_json()
    assert listing["login"] == "owner@example.com"
    pages = listing["pages"]
    kept = {"/", "/sitemap", "/offline", this_week["url"], recent["url"], draft["url"]}
    assert kept <= set(pages)
    assert old["url"] not in pages
    # An owner keeps the forms a capture and an edit are written in.
    assert "/entries/new" in pages and f"/entries/{recent['id']}/edit" in pages

    seen = viewer("get", "/offline/pages.json").get_json()
    assert seen["login"] == "viewer@example.com" and not seen["can_write"]
    assert recent["url"] in seen["pages"] and draft["url"] not in seen["pages"]
    assert not any(p.endswith("/edit") or p == "/entries/new" for p in seen["pages"])


def test_nobody_gets_no_offline_set(served):
    assert served.client.get("/offline/pages.json").status_code == 403
    assert served.client.get("/sw.js").status_code == 403


def test_the_offline_page_lists_nothing_without_script(served):
    response = served.client.get("/offline", headers=AS_OWNER)
    assert response.status_code == 200
    assert "Not kept on this device" in response.get_data(as_text=True)
