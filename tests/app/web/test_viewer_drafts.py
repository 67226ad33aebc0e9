"""A draft is the owner's until it is published: no read path shows it to a viewer (or a
feed reader) — not Home, not the letter through the API, not its tags, and a published
[[link]] to it reads as a link to nothing. The owner sees all of it, links live."""

from app.notebook import isoweeks
from tests.helpers import OWNER, VIEWER


def setup_notebook(served):
    owner = served.as_user(OWNER)
    week = isoweeks.iso_week(isoweeks.today("UTC"))
    letter = owner("get", f"/api/v1/weeks/{week}").get_json()["letter"]
    owner("put", f"/api/v1/entries/{letter['id']}",
          json={"body": "## Notes\n\nletter secrets", "status": "draft",
                "base_revision": letter["revision"]})
    owner("post", "/api/v1/entries", json={"title": "Secret plan", "body": "hush",
                                           "tags": ["onlydraft"], "status": "draft"})
    public = owner("post", "/api/v1/entries", json={
        "title": "Public note", "body": "See [[Secret plan]] and [[Nothing yet]].",
        "tags": ["open"]}).get_json()
    return week, public


def test_viewers_see_no_draft_anywhere(served):
    week, public = setup_notebook(served)
    viewer = served.as_user(VIEWER)
    assert "letter secrets" not in viewer("get", "/").text
    assert viewer("get", f"/api/v1/weeks/{week}").status_code == 404
    assert "letter secrets" not in viewer("get", f"/weeks/{week}").text
    tags = {t["tag"] for t in viewer("get", "/api/v1/tags").get_json()["tags"]}
    assert "open" in tags and "onlydraft" not in tags
    assert "onlydraft" not in viewer("get", "/sitemap").text
    page = viewer("get", public["url"]).text
    assert "Secret plan" in page  # the words the author wrote stay ...
    assert "/secret-plan" not in page  # ... but not the draft's address
    api_html = viewer("get", f"/api/v1/entries/{public['id']}").get_json()["html"]
    assert 'class="wikilink missing">Secret plan' in api_html and "wikilink draft" not in api_html
    feed = served.client.get("/feed.atom", headers={"Tailscale-User-Login": VIEWER}).text
    assert "wikilink draft" not in feed and "letter secrets" not in feed


def test_the_owner_sees_drafts_and_links_to_them(served):
    week, public = setup_notebook(served)
    owner = served.as_user(OWNER)
    assert "letter secrets" in owner("get", "/").text
    assert owner("get", f"/api/v1/weeks/{week}").status_code == 200
    html = owner("get", f"/api/v1/entries/{public['id']}").get_json()["html"]
    assert 'class="wikilink draft"' in html and "/entries/" in html


def test_publishing_the_draft_makes_its_links_live_for_viewers(served):
    _, public = setup_notebook(served)
    owner, viewer = served.as_user(OWNER), served.as_user(VIEWER)
    secret = owner("get", "/api/v1/search?q=Secret").get_json()["results"][0]
    owner("put", f"/api/v1/entries/{secret['id']}",
          json={"status": "published", "base_revision": secret["revision"]})
    html = viewer("get", f"/api/v1/entries/{public['id']}").get_json()["html"]
    assert 'class="wikilink"' in html and "wikilink missing\">Secret" not in html


def test_a_draft_that_links_to_a_page_is_in_its_backlinks_for_owners_only(served):
    owner, viewer = served.as_user(OWNER), served.as_user(VIEWER)
    public = owner("post", "/api/v1/entries", json={"title": "Open hub", "body": "x"}).get_json()
    owner("post", "/api/v1/entries", json={"title": "Hidden source", "status": "draft",
                                           "body": "Builds on [[Open hub]] quietly."})
    owner("post", "/api/v1/entries", json={"title": "Shown source",
                                           "body": "Cites [[Open hub]] openly."})
    seen_by_owner = owner("get", public["url"]).text
    seen_by_viewer = viewer("get", public["url"]).text
    assert "Hidden source" in seen_by_owner and "Builds on Open hub quietly." in seen_by_owner
    assert "Shown source" in seen_by_viewer and "Cites Open hub openly." in seen_by_viewer
    assert "Hidden source" not in seen_by_viewer and "quietly" not in seen_by_viewer
    api = f"/api/v1/entries/{public['id']}/backlinks"
    by_owner, by_viewer = owner("get", api).get_json(), viewer("get", api).get_json()
    assert [b["title"] for b in by_owner["backlinks"]] == ["Shown source", "Hidden source"]
    assert [b["title"] for b in by_viewer["backlinks"]] == ["Shown source"]
    assert (by_owner["total"], by_viewer["total"]) == (2, 1)  # a draft is not even counted


def test_a_draft_revision_stays_the_owners_after_publishing(served):
    """Created as a draft, published later with new text: a viewer reads the published
    text, and the draft's text through no revision path (the API's list and revision, the
    history page, a diff) and no search snippet. The owner still sees every revision."""
    owner, viewer = served.as_user(OWNER), served.as_user(VIEWER)
    made = owner("post", "/api/v1/entries", json={
        "title": "Plan", "body": "draftonly words", "status": "draft"}).get_json()
    owner("put", f"/api/v1/entries/{made['id']}",
          json={"body": "public words", "status": "published",
                "base_revision": made["revision"]})
    base = f"/api/v1/entries/{made['id']}"
    listed = viewer("get", f"{base}/revisions").get_json()["revisions"]
    assert [r["number"] for r in listed] == [2]
    assert viewer("get", f"{base}/revisions/1").status_code == 404
    assert viewer("get", f"{base}/revisions/2").get_json()["body"] == "public words"
    for path in (f"/entries/{made['id']}/diff?a=1&b=2", f"/entries/{made['id']}/diff?a=2&b=1"):
        answer = viewer("get", path)
        assert answer.status_code == 404 and "draftonly" not in answer.text
    history = viewer("get", f"/entries/{made['id']}/history")
    assert history.status_code == 200 and 'value="1"' not in history.text
    assert viewer("get", "/api/v1/search?q=draftonly").get_json()["results"] == []
    found = viewer("get", "/api/v1/search?q=public").get_json()["results"]
    assert len(found) == 1 and "draftonly" not in str(found)
    assert "draftonly" not in viewer("get", "/search?q=public").text
    assert owner("get", f"{base}/revisions/1").get_json()["body"] == "draftonly words"
    assert owner("get", f"/entries/{made['id']}/diff?a=1&b=2").status_code == 200
    assert [r["number"] for r in owner("get", f"{base}/revisions").get_json()["revisions"]] \
        == [2, 1]
