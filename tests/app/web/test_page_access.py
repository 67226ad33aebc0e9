"""Who sees what on the pages, in serve mode with an owner and a viewer: drafts stay hidden
from viewers; viewers read everything else but get no forms and cannot post one; a stranger
is told who they were seen as; a form posted from another site is refused."""

from __future__ import annotations

from app.journal import runs
from app.models import Entry, Run, Schedule
from tests.helpers import (
    OWNER,
    VIEWER,
    count,
    entry_form,
    form_for,
    load,
    post_forms,
    schedule_form,
)
from tests.strict_pages import assert_strict_page

# -- the notebook -------------------------------------------------------------------------


def test_drafts_are_hidden_from_viewers(served):
    owner, viewer = served.as_user(OWNER), served.as_user(VIEWER)
    response = owner("post", "/entries/new",
                     data=entry_form(title="Secret plan", status="draft", tags="plans"))
    assert response.status_code == 303
    url = response.location
    owner("post", "/entries/new", data=entry_form(title="Public note", tags="plans"))
    assert owner("get", url).status_code == 200
    assert viewer("get", url).status_code == 404
    entry_id = url.split("/")[2]
    for path in (f"/entries/{entry_id}", f"/entries/{entry_id}/history",
                 f"/entries/{entry_id}/diff?a=1&b=1"):
        assert viewer("get", path).status_code == 404
    for path in ("/", "/sitemap?year=2024", "/tags/plans", "/search?q=plan",
                 "/weeks/2024-W13"):
        page = viewer("get", path)
        assert page.status_code == 200
        assert "Secret plan" not in page.text and "Public note" in page.text
        assert "Secret plan" in owner("get", path).text


def test_the_shared_header_and_footer_are_each_readers_own(served):
    """base.html's header and footer are rendered once per variant and kept
    (chrome.site_chrome): turn by turn on the same pages, the owner's and the viewer's
    never leak into each other."""
    owner, viewer = served.as_user(OWNER), served.as_user(VIEWER)
    for _ in range(2):
        for path in ("/", "/sitemap", "/runs"):
            mine, theirs = owner("get", path).text, viewer("get", path).text
            assert 'id="new-entry-link"' in mine and 'id="new-entry-link"' not in theirs
            assert f"Signed in as {OWNER}</li>" in mine and "(read only)" not in mine
            assert f"Signed in as {VIEWER} (read only)</li>" in theirs
            assert "Letter template" in mine and "Letter template" not in theirs
    search = owner("get", "/search?q=x").text  # its own box: none in the header
    assert 'id="site-search"' not in search and 'id="site-search"' in owner("get", "/").text


def test_viewers_read_but_cannot_write(served):
    owner, viewer = served.as_user(OWNER), served.as_user(VIEWER)
    url = owner("post", "/entries/new", data=entry_form(title="Note")).location
    page = viewer("get", url).text
    assert "Note" in page and "/edit" not in page and "Read only" not in page
    assert "(read only)" in page
    entry_id = url.split("/")[2]
    for path in ("/entries/new", f"/entries/{entry_id}/edit", f"/entries/{entry_id}/delete",
                 "/settings/template"):
        assert viewer("get", path).status_code == 403
    for path in ("/entries/new", f"/entries/{entry_id}/edit", f"/entries/{entry_id}/delete",
                 "/preview", "/weeks/2024-W13/letter", "/settings/template"):
        response = viewer("post", path, data={**entry_form(), "base_revision": "1"})
        assert response.status_code == 403
        assert VIEWER in response.text
    assert owner("get", url).status_code == 200


def test_a_stranger_is_told_who_they_were_seen_as(served):
    response = served.as_user("eve@x")("get", "/")
    assert response.status_code == 403
    assert "You were seen as" in response.text and "eve@x" in response.text
    assert_strict_page(response)
    assert served.as_user(None)("get", "/").status_code == 403


def test_cross_site_form_posts_are_refused(client, db):
    response = client.post("/entries/new", data=entry_form(),
                           headers={"Sec-Fetch-Site": "cross-site"})
    assert response.status_code == 403
    assert count(db, Entry) == 0


# -- the journal --------------------------------------------------------------------------


def test_viewers_see_everything_but_no_forms(served):
    owner, viewer = served.as_user(OWNER), served.as_user(VIEWER)
    assert owner("post", "/experiments/collectives/run",
                 data=form_for("collectives")).status_code == 303
    assert owner("post", "/schedules", data=schedule_form()).status_code == 303
    for path in ("/experiments", "/runs", "/runs/1", "/schedules", "/schedules/1",
                 "/runs/compare?ids=1,1"):
        response = viewer("get", path)
        if path.endswith("1,1"):
            assert response.status_code == 422  # one run twice is one run
            continue
        assert response.status_code == 200, path
        assert_strict_page(response)
        assert post_forms(response.text) == [], path
        assert "New run" not in response.text and "Cancel run" not in response.text
        assert "param." not in response.text  # no generated form either
    assert "Sunday sweep" in viewer("get", "/schedules").text
    assert "(read only)" in viewer("get", "/runs/1").text
    for path in ("/runs/1", "/schedules/1"):  # owners do get the forms
        assert post_forms(owner("get", path).text)


def test_viewers_cannot_write(served):
    db = served.db
    owner, viewer = served.as_user(OWNER), served.as_user(VIEWER)
    owner("post", "/experiments/collectives/run", data=form_for("collectives"))
    owner("post", "/schedules", data=schedule_form())
    for path in ("/experiments/collectives/run", "/runs/1/cancel", "/schedules/1/delete"):
        assert viewer("get", path).status_code == 403, path
    for path, data in (("/experiments/collectives/run", form_for("collectives")),
                       ("/runs/1/cancel", {}), ("/runs/1/rerun", {}),
                       ("/schedules", schedule_form()),
                       ("/schedules/1", schedule_form(cron="0 3 * * *")),
                       ("/schedules/1/delete", {})):
        response = viewer("post", path, data=data)
        assert response.status_code == 403, path
        assert VIEWER in response.text
    assert count(db, Run) == 1 and load(db, Run, 1).status == runs.QUEUED
    assert count(db, Schedule) == 1 and load(db, Schedule, 1).cron == "0 2 * * sun"
