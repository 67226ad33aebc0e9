"""The notebook's pages, through the real app and a real SQLite file: every page renders
under the strict CSP, forms keep what was typed when they fail, stale edits get a merge
view, history diffs and restores, drafts stay hidden from viewers, bad input is a 4xx."""

from __future__ import annotations

import datetime as dt
import re

import pytest
import sqlalchemy as sa

from app.models import Entry, Revision
from app.notebook import entries, isoweeks, letters
from tests.strict_pages import assert_strict_page

THIS_WEEK = isoweeks.iso_week(dt.datetime.now(dt.UTC).date())  # the fixtures run in UTC


def form(**fields) -> dict:
    base = {"date": "2024-03-27", "title": "Pipeline notes", "tags": "gpu pipeline",
            "status": "published", "body": "Bubble fraction is (p-1)/(m+p-1)."}
    base.update(fields)
    return base


def create(client, **fields) -> int:
    response = client.post("/entries/new", data=form(**fields))
    assert response.status_code == 303, response.text
    return int(re.match(r"/entries/(\d+)/", response.location)[1])


def count(db, model=Entry) -> int:
    with db.read() as session:
        return session.scalar(sa.select(sa.func.count()).select_from(model))


def load(db, entry_id: int) -> Entry | None:
    with db.read() as session:
        return session.get(Entry, entry_id)


def edit(client, entry_id: int, base: int | str, **fields):
    return client.post(f"/entries/{entry_id}/edit", data={**form(**fields),
                                                          "base_revision": str(base)})


# -- every page renders -------------------------------------------------------------------


def test_every_page_renders_under_the_csp(client):
    entry_id = create(client, body="See [[Missing page]].\n\n## One\n\n## Two\n\n"
                                    "```python\nx = 1\n```")
    edit(client, entry_id, 1, body="changed")
    with client.application.app_context():
        slug = load(client.application.extensions["db"], entry_id).slug
    pages = [
        "/", "/entries/new", "/entries/new?title=Foo&date=2024-01-02",
        f"/entries/{entry_id}/{slug}", f"/entries/{entry_id}/edit",
        f"/entries/{entry_id}/history", f"/entries/{entry_id}/diff?a=1&b=2",
        f"/entries/{entry_id}/delete", f"/weeks/{THIS_WEEK}", "/weeks/2024-W13",
        "/sitemap", "/tags/gpu", "/search?q=bubble", "/search", "/settings/template",
    ]
    for path in pages:
        response = client.get(path)
        assert response.status_code == 200, path
        assert response.mimetype == "text/html"
        assert_strict_page(response)
        assert "Site map" in response.text and 'name="q"' in response.text  # the header


@pytest.mark.parametrize("path", ["/no/such/page", "/weeks/2024-W99", "/entries/999",
                                  "/search?q=%22open"])
def test_error_pages_are_pages_too(client, path):
    response = client.get(path)
    assert 400 <= response.status_code < 500
    assert_strict_page(response)
    assert "<header" in response.text


def test_static_assets_and_pygments_css(client):
    assert client.get("/pygments.css").mimetype == "text/css"
    assert ".highlight" in client.get("/pygments.css").text
    page = client.get("/").text
    css = re.search(r'href="(/static/app\.css\?v=\w+)"', page)[1]
    js = re.search(r'src="(/static/app\.js\?v=\w+)"', page)[1]
    assert client.get(css).status_code == 200
    assert client.get(js).status_code == 200


# -- home and capture ---------------------------------------------------------------------


def test_home_shows_this_weeks_letter_created_on_demand(client, db):
    assert count(db) == 0
    response = client.get("/")
    assert response.status_code == 200
    with db.read() as session:
        letter = letters.find_letter(session, THIS_WEEK)
    assert letter is not None
    assert f"Week {THIS_WEEK}" in response.text
    assert "<h2" in response.text  # the template's sections, rendered in full
    client.get("/")
    assert count(db) == 1  # created once


def test_capture_box_posts_an_entry_for_today_and_opens_it(client, db):
    response = client.post("/entries/new", data={"title": "Quick thought", "body": "*hm*"})
    assert response.status_code == 303
    page = client.get(response.location)
    assert "Quick thought" in page.text and "<em>hm</em>" in page.text
    with db.read() as session:
        entry = session.scalar(sa.select(Entry).where(Entry.title == "Quick thought"))
    assert entry.date == dt.datetime.now(dt.UTC).date()
    assert "Quick thought" in client.get("/").text


# -- entry page ---------------------------------------------------------------------------


def test_entry_urls_redirect_to_the_canonical_slug(client):
    entry_id = create(client, title="Ring all-reduce")
    assert client.get(f"/entries/{entry_id}").location == f"/entries/{entry_id}/ring-all-reduce"
    assert client.get(f"/entries/{entry_id}/old-slug").location.endswith("/ring-all-reduce")
    client.get("/")
    with client.application.app_context():
        letter_id = letters.find_letter(client.application.extensions["db"].session(),
                                      THIS_WEEK).id
    assert client.get(f"/entries/{letter_id}").location == f"/weeks/{THIS_WEEK}"


def test_entry_page_shows_tags_toc_neighbours_and_backlinks(client):
    first = create(client, title="Earlier", date="2024-03-25", body="x")
    target = create(client, title="Target", date="2024-03-26", tags="zero",
                    body="## Setup\n\ntext\n\n## Results\n\nmore")
    create(client, title="Later", date="2024-03-28",
           body="Compared against [[Target]] with care.")
    page = client.get(f"/entries/{target}/target").text
    assert 'href="/tags/zero"' in page
    assert 'class="toc-box"' in page and "Results" in page
    assert f'href="/entries/{first}/earlier"' in page and "Later" in page
    assert "Linked from" in page and "Compared against Target with care." in page
    assert f'href="/entries/{target}/edit"' in page
    assert f'href="/entries/{target}/history"' in page
    assert f'href="/entries/{target}/delete"' in page


def test_stored_html_is_shown_not_re_rendered(client, db):
    entry_id = create(client, title="Stored", body="original **bold**")
    with db.write() as session:  # if the page rendered on view, this would not show
        session.get(Entry, entry_id).body_html = "<p>from the store</p>"
    assert "from the store" in client.get(f"/entries/{entry_id}/stored").text


def test_hostile_markdown_does_not_reach_the_page_as_markup(client):
    entry_id = create(client, title="Hostile",
                      body='<script>alert(1)</script> <img src=x onerror=alert(1)> '
                           '[x](javascript:alert(1)) <b style="color:red">b</b>')
    response = client.get(f"/entries/{entry_id}/hostile")
    assert_strict_page(response)


def test_new_entry_form_prefills_from_a_missing_wiki_link(client):
    entry_id = create(client, title="Linker", body="Go to [[Not Yet Written]].")
    page = client.get(f"/entries/{entry_id}/linker").text
    href = re.search(r'<a class="wikilink missing" href="([^"]+)"', page)[1]
    form_page = client.get(href.replace("&amp;", "&")).text
    assert 'value="Not Yet Written"' in form_page


# -- create / edit / delete ---------------------------------------------------------------


def test_create_edit_delete_flow(client, db):
    entry_id = create(client, title="Draft idea", body="first", status="draft")
    assert "draft" in client.get(f"/entries/{entry_id}/draft-idea").text
    response = edit(client, entry_id, 1, title="Published idea", body="second", status="published")
    assert response.status_code == 303
    assert response.location == f"/entries/{entry_id}/published-idea"
    entry = load(db, entry_id)
    assert (entry.revision, entry.body_md, entry.status) == (2, "second", "published")

    confirm = client.get(f"/entries/{entry_id}/delete")
    assert "Delete for good" in confirm.text and 'name="base_revision" value="2"' in confirm.text
    response = client.post(f"/entries/{entry_id}/delete", data={"base_revision": "2"})
    assert response.status_code == 303 and response.location == "/"
    assert load(db, entry_id) is None
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
    data = form(**{"body": typed, **fields})
    if name == "body":
        typed = data["body"]
    response = client.post("/entries/new", data=data)
    assert response.status_code == 422
    assert count(db) == 0
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
    entry_id = create(client, body="saved text")
    response = edit(client, entry_id, 1, body="edited but not saved", **fields)
    assert response.status_code == 422
    assert "edited but not saved" in response.text and message in response.text
    assert 'name="base_revision" value="1"' in response.text
    entry = load(db, entry_id)
    assert (entry.revision, entry.body_md) == (1, "saved text")


@pytest.mark.parametrize("base", ["", "abc", "-1", "1.5", "99999999999"])
def test_a_bad_base_revision_is_refused(client, db, base):
    entry_id = create(client, body="saved text")
    response = edit(client, entry_id, base, body="new text")
    assert response.status_code == 422
    assert "base_revision" in response.text
    assert load(db, entry_id).body_md == "saved text"
    response = client.post(f"/entries/{entry_id}/delete", data={"base_revision": base})
    assert response.status_code == 422
    assert load(db, entry_id) is not None


@pytest.mark.parametrize(("method", "path"), [
    ("get", "/entries/999/no-slug"), ("get", "/entries/999/edit"), ("post", "/entries/999/edit"),
    ("get", "/entries/999/delete"), ("post", "/entries/999/delete"),
    ("get", "/entries/999/history"), ("get", "/entries/999/diff?a=1&b=1"),
    ("post", "/entries/999/restore"), ("get", "/tags/nothing-here"),
])
def test_unknown_ids_are_404(client, method, path):
    data = {**form(), "base_revision": "1", "revision": "1"} if method == "post" else None
    response = getattr(client, method)(path, data=data)
    assert response.status_code == 404
    assert_strict_page(response)


def test_a_letter_cannot_leave_its_week(client, db):
    client.get("/")
    with db.read() as session:
        letter = letters.find_letter(session, THIS_WEEK)
    response = edit(client, letter.id, letter.revision, title=letter.title, date="2001-01-01",
                    body="kept", tags="")
    assert response.status_code == 422
    assert "within its week" in response.text and "kept" in response.text


# -- conflicts ----------------------------------------------------------------------------


def test_two_devices_editing_from_the_same_base_get_a_merge_view(client, db):
    entry_id = create(client, title="Shared", body="line one\nline two\nline three")
    phone = client.get(f"/entries/{entry_id}/edit").text
    laptop = client.get(f"/entries/{entry_id}/edit").text
    assert 'name="base_revision" value="1"' in phone and 'name="base_revision" value="1"' in laptop

    assert edit(client, entry_id, 1, title="Shared",
                body="line one\nline two (laptop)\nline three").status_code == 303
    response = edit(client, entry_id, 1, title="Shared",
                    body="line one\nline two\nline three\nphone's <new> line")
    assert response.status_code == 409
    page = response.text
    assert_strict_page(response)
    assert "Not saved" in page and "nothing was overwritten" in page
    assert "line two (laptop)" in page  # the current text
    assert "phone&#39;s &lt;new&gt; line" in page or "phone's &lt;new&gt; line" in page
    assert 'name="base_revision" value="2"' in page  # the merge saves on top of the current
    assert re.search(r'<textarea id="f-body" name="body"[^>]*>line one\nline two\nline three\n'
                     r"phone", page)
    assert '<tr class="add">' in page and '<tr class="del">' in page
    assert "What changed elsewhere since revision 1" in page
    entry = load(db, entry_id)
    assert (entry.revision, entry.body_md) == (2, "line one\nline two (laptop)\nline three")
    assert count(db) == 1  # no "conflict copy"

    merged = "line one\nline two (laptop)\nline three\nphone's line"
    assert edit(client, entry_id, 2, title="Shared", body=merged).status_code == 303
    entry = load(db, entry_id)
    assert (entry.revision, entry.body_md) == (3, merged)


def test_the_merge_view_compares_lines_as_browsers_send_them(client):
    entry_id = create(client, body="same first line\nsecond")
    edit(client, entry_id, 1, body="same first line\nsecond, laptop")
    response = edit(client, entry_id, 1, body="same first line\r\nsecond, phone")  # CRLF
    assert response.status_code == 409
    mine = response.text.split("What changed elsewhere")[0]  # not the base → current diff
    rows = re.findall(r'<tr class="(\w+)">.*?<td class="code">(.*?)</td>', mine, re.S)
    assert [kind for kind, _ in rows if kind != "skip"] == ["same", "del", "add"]
    assert "<del>laptop</del>" in rows[1][1] and "<ins>phone</ins>" in rows[2][1]


def test_deleting_a_changed_entry_asks_again(client, db):
    entry_id = create(client)
    edit(client, entry_id, 1, body="newer")
    response = client.post(f"/entries/{entry_id}/delete", data={"base_revision": "1"})
    assert response.status_code == 409
    assert "Nothing was deleted" in response.text
    assert 'name="base_revision" value="2"' in response.text
    assert load(db, entry_id) is not None


# -- history ------------------------------------------------------------------------------


def test_history_diff_and_restore(client, db):
    entry_id = create(client, title="Evolving", body="alpha\nbeta\ngamma")
    edit(client, entry_id, 1, title="Evolving", body="alpha\nbeta changed\ngamma")
    edit(client, entry_id, 2, title="Evolved", body="alpha\nbeta changed\ngamma\ndelta")

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
    entry = load(db, entry_id)
    assert (entry.revision, entry.title, entry.body_md) == (4, "Evolving", "alpha\nbeta\ngamma")
    assert "restored revision 1" in client.get(f"/entries/{entry_id}/history").text
    assert count(db, Revision) == 4


def test_restore_with_a_stale_base_changes_nothing(client, db):
    entry_id = create(client, body="one")
    edit(client, entry_id, 1, body="two")
    response = client.post(f"/entries/{entry_id}/restore",
                           data={"revision": "1", "base_revision": "1"})
    assert response.status_code == 409
    assert load(db, entry_id).body_md == "two"
    for data in ({"revision": "x", "base_revision": "2"}, {"revision": "1"},
                 {"revision": "77", "base_revision": "2"}):
        assert client.post(f"/entries/{entry_id}/restore", data=data).status_code in (404, 422)
    assert load(db, entry_id).revision == 2


def test_diff_escapes_everything(client):
    entry_id = create(client, body="safe")
    edit(client, entry_id, 1, body='<script>alert("x")</script>\n<img src=x onerror=y>')
    response = client.get(f"/entries/{entry_id}/diff?a=1&b=2")
    assert "&lt;script&gt;" in response.text
    assert_strict_page(response)


@pytest.mark.parametrize(("query", "status"), [
    ("a=1", 400), ("a=x&b=1", 400), ("a=1&b=-2", 400), ("a=1&b=42", 404),
])
def test_diff_bad_arguments(client, query, status):
    entry_id = create(client)
    assert client.get(f"/entries/{entry_id}/diff?{query}").status_code == status


# -- letters ------------------------------------------------------------------------------


def test_week_page_lists_the_weeks_entries_and_neighbours(client):
    create(client, title="In W13", date="2024-03-27")
    create(client, title="In W14", date="2024-04-02")
    page = client.get("/weeks/2024-W13").text
    assert "In W13" in page and "In W14" not in page
    assert 'href="/weeks/2024-W12"' in page and 'href="/weeks/2024-W14"' in page
    assert "Start this week" in page


def test_starting_a_past_weeks_letter(client, db):
    response = client.post("/weeks/2024-W13/letter")
    assert response.status_code == 303 and response.location == "/weeks/2024-W13"
    page = client.get("/weeks/2024-W13").text
    assert "Week 2024-W13" in page and "Start this week" not in page
    assert client.post("/weeks/2024-W13/letter").status_code == 303
    assert count(db) == 1


def test_this_weeks_page_creates_its_letter(client, db):
    page = client.get(f"/weeks/{THIS_WEEK}").text
    assert "This week&#39;s letter" in page or "This week's letter" in page
    assert count(db) == 1


@pytest.mark.parametrize("week", ["2024-W54", "2021-W53", "2024W13", "bad", "2024-w13"])
def test_bad_weeks_are_404(client, db, week):
    assert client.get(f"/weeks/{week}").status_code == 404
    assert client.post(f"/weeks/{week}/letter").status_code == 404
    assert count(db) == 0


# -- site map, tags, search ---------------------------------------------------------------


def test_sitemap_groups_by_year_and_week_with_a_tag_index(client):
    create(client, title="Old one", date="2023-06-01", tags="reading")
    create(client, title="New one", date="2024-03-27", tags="reading gpu")
    client.post("/weeks/2024-W13/letter")
    page = client.get("/sitemap").text  # the newest year, with the others one click away
    assert 'id="y2024"' in page and 'href="/weeks/2024-W13"' in page
    assert 'href="/sitemap?year=2023"' in page and 'href="/weeks/2023-W22"' not in page
    assert re.search(r'href="/tags/reading">#reading</a> <span class="count">2</span>', page)
    older = client.get("/sitemap?year=2023").text
    assert 'href="/weeks/2023-W22"' in older and "Old one" in older and "New one" not in older
    assert client.get("/sitemap?year=20x4").status_code == 400
    assert "Nothing in 1999" in client.get("/sitemap?year=1999").text
    tag_page = client.get("/tags/reading").text
    assert "Old one" in tag_page and "New one" in tag_page


def test_tag_pages_are_paged(client, db):
    from app.notebook import entries

    with db.write() as session:
        for day in range(1, 56):
            entries.create(session, author="x", date=f"2024-01-{day % 28 + 1:02d}",
                           title=f"Note {day}", tags=["many"])
    first = client.get("/tags/many").text
    assert "55 entries" in first and "1–50 shown" in first and "Older →" in first
    second = client.get("/tags/many?offset=50").text
    assert second.count('class="entry-title"') == 5 and "← Newer" in second
    assert client.get("/tags/many?offset=x").status_code == 400


def test_search_shows_ranked_highlighted_hits(client):
    create(client, title="Tensor parallel", body="column and row splits")
    create(client, title="Other", body="mentions tensor once")
    response = client.get("/search?q=tensor")
    assert response.status_code == 200
    page = response.text
    assert page.index("Tensor parallel") < page.index("Other")
    assert "<mark>" in page
    assert "tag:" in page and "kind:week" in page  # the syntax help
    assert "Nothing matches" in client.get("/search?q=zebra").text


@pytest.mark.parametrize("query", ['"unbalanced', "OR", "a OR", "-alone", "from:yesterday",
                                   "week:13", "kind:thing", "NEAR", "x" * 501])
def test_malformed_search_is_a_400_with_the_reason(client, query):
    response = client.get("/search", query_string={"q": query})
    assert response.status_code == 400
    assert 'id="q-error"' in response.text
    assert_strict_page(response)


def test_search_offset_must_be_a_number(client):
    assert client.get("/search?q=x&offset=-1").status_code == 400
    assert client.get("/search?q=x&offset=abc").status_code == 400


# -- settings and preview -----------------------------------------------------------------


def test_letter_template_setting(client, db):
    response = client.post("/settings/template", data={"template": "## Wins\n\n## Losses\n"})
    assert response.status_code == 303
    assert "## Wins" in client.get("/settings/template").text
    client.post("/weeks/2024-W13/letter")
    assert "Losses" in client.get("/weeks/2024-W13").text
    too_long = "z" * 20_001
    response = client.post("/settings/template", data={"template": too_long})
    assert response.status_code == 422 and too_long in response.text
    with db.read() as session:
        assert letters.letter_template(session).startswith("## Wins")


def test_preview_renders_like_a_save_would(client):
    create(client, title="Known")
    response = client.post("/preview", data={"body": "[[Known]] and [[Unknown]] #tag\n\n"
                                                     "<script>alert(1)</script>"})
    assert response.status_code == 200
    assert 'class="wikilink"' in response.text and 'class="wikilink missing"' in response.text
    assert "<script" not in response.text
    assert client.post("/preview", data={"body": "x" * (entries.MAX_BODY + 1)}).status_code == 422


# -- who sees what ------------------------------------------------------------------------


@pytest.fixture
def served(make_app):
    app = make_app(AUTH_MODE="serve", OWNERS=["o@x"], VIEWERS=["v@x"])
    client = app.test_client()

    def as_user(login):
        def call(method, path, **kw):
            headers = {"Tailscale-User-Login": login} if login else {}
            return getattr(client, method)(path, headers=headers, **kw)
        return call

    return as_user


def test_drafts_are_hidden_from_viewers(served):
    owner, viewer = served("o@x"), served("v@x")
    response = owner("post", "/entries/new",
                     data=form(title="Secret plan", status="draft", tags="plans"))
    assert response.status_code == 303
    url = response.location
    owner("post", "/entries/new", data=form(title="Public note", tags="plans"))
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


def test_viewers_read_but_cannot_write(served):
    owner, viewer = served("o@x"), served("v@x")
    url = owner("post", "/entries/new", data=form(title="Note")).location
    page = viewer("get", url).text
    assert "Note" in page and "/edit" not in page and "Read only" not in page
    assert "(read only)" in page
    entry_id = url.split("/")[2]
    for path in ("/entries/new", f"/entries/{entry_id}/edit", f"/entries/{entry_id}/delete",
                 "/settings/template"):
        assert viewer("get", path).status_code == 403
    for path in ("/entries/new", f"/entries/{entry_id}/edit", f"/entries/{entry_id}/delete",
                 "/preview", "/weeks/2024-W13/letter", "/settings/template"):
        response = viewer("post", path, data={**form(), "base_revision": "1"})
        assert response.status_code == 403
        assert "v@x" in response.text
    assert owner("get", url).status_code == 200


def test_a_stranger_is_told_who_they_were_seen_as(served):
    response = served("eve@x")("get", "/")
    assert response.status_code == 403
    assert "You were seen as" in response.text and "eve@x" in response.text
    assert_strict_page(response)
    assert served(None)("get", "/").status_code == 403


def test_cross_site_form_posts_are_refused(client, db):
    response = client.post("/entries/new", data=form(),
                           headers={"Sec-Fetch-Site": "cross-site"})
    assert response.status_code == 403
    assert count(db) == 0
