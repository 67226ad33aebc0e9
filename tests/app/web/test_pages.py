"""The notebook's pages for reading, through the real app and a real SQLite file: every
page renders under the strict CSP, home and capture, the entry page, week letters, the site
map, tags, search, settings and preview; bad input is a 4xx.

Editing (forms that keep what was typed, merges, history) is in test_page_editing.py, who
sees what in test_page_access.py.
"""

from __future__ import annotations

import datetime as dt
import re
import subprocess
import sys

import pytest
import sqlalchemy as sa

from app.models import Entry
from app.notebook import addresses, entries, letters
from tests.helpers import ROOT, THIS_WEEK, count, create_entry, edit_entry, load
from tests.strict_pages import assert_strict_page

# -- every page renders -------------------------------------------------------------------


def test_every_page_renders_under_the_csp(client):
    entry_id = create_entry(client, body="See [[Missing page]].\n\n## One\n\n## Two\n\n"
                                    "```python\nx = 1\n```")
    edit_entry(client, entry_id, 1, body="changed")
    with client.application.app_context():
        slug = load(client.application.extensions["db"], Entry, entry_id).slug
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


def test_remembered_urls_follow_the_mount_point(client):
    # templates' url_for is remembered per (mount point, endpoint, values): a notebook
    # served under a path prefix must not hand out the root's URLs, nor the reverse
    root = client.get("/").text
    mounted = client.get("/", base_url="http://localhost/nb").text
    assert 'href="/static/app.css?v=' in root and 'href="/sitemap"' in root
    assert 'href="/nb/static/app.css?v=' in mounted and 'href="/nb/sitemap"' in mounted
    assert 'href="/sitemap"' not in mounted
    assert 'href="/nb/sitemap"' not in client.get("/").text


# -- home and capture ---------------------------------------------------------------------


def test_home_shows_this_weeks_letter_created_on_demand(client, db):
    assert count(db, Entry) == 0
    response = client.get("/")
    assert response.status_code == 200
    with db.read() as session:
        letter = letters.find_letter(session, THIS_WEEK)
    assert letter is not None
    assert f"Week {THIS_WEEK}" in response.text
    assert "<h2" in response.text  # the template's sections, rendered in full
    client.get("/")
    assert count(db, Entry) == 1  # created once


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
    entry_id = create_entry(client, title="Ring all-reduce")
    assert client.get(f"/entries/{entry_id}").location == f"/entries/{entry_id}/ring-all-reduce"
    assert client.get(f"/entries/{entry_id}/old-slug").location.endswith("/ring-all-reduce")
    client.get("/")
    with client.application.app_context():
        letter_id = letters.find_letter(client.application.extensions["db"].session(),
                                      THIS_WEEK).id
    assert client.get(f"/entries/{letter_id}").location == f"/weeks/{THIS_WEEK}"


def test_entry_page_shows_tags_toc_neighbours_and_backlinks(client):
    first = create_entry(client, title="Earlier", date="2024-03-25", body="x")
    target = create_entry(client, title="Target", date="2024-03-26", tags="zero",
                    body="## Setup\n\ntext\n\n## Results\n\nmore")
    create_entry(client, title="Later", date="2024-03-28",
           body="Compared against [[Target]] with care.")
    page = client.get(f"/entries/{target}/target").text
    assert 'href="/tags/zero"' in page
    assert 'class="toc-box"' in page and "Results" in page
    assert f'href="/entries/{first}/earlier"' in page and "Later" in page
    assert "Linked from" in page and "Compared against Target with care." in page
    assert f'href="/entries/{target}/edit"' in page
    assert f'href="/entries/{target}/history"' in page
    assert f'href="/entries/{target}/delete"' in page


def test_backlinks_name_each_source_its_day_and_context_escaped(client):
    # The entry page and the letter share one list (_macros.html backlinks_section), made
    # from (address, title, day, context) lines: every part escaped, drafts only for owners.
    hub = create_entry(client, title="Hub", date="2024-03-26", body="x")
    source = create_entry(client, title="<b>Bold</b> claim", date="2024-03-28",
                          body=f"See [[Hub]] & [[{THIS_WEEK}]] <i>too</i>.")
    source_url = client.get(f"/entries/{source}").location
    for page in (client.get(f"/entries/{hub}/hub").text, client.get(f"/weeks/{THIS_WEEK}").text):
        section = page.split('<section class="backlinks"')[1].split("</section>")[0]
        assert f'<a href="{source_url}">&lt;b&gt;Bold&lt;/b&gt; claim</a>' in section
        assert '<span class="meta">Thu 28 Mar 2024</span>' in section
        assert "<blockquote>" in section and "&amp;" in section and "<i>" not in section


def test_a_hubs_page_shows_its_newest_backlinks_and_all_of_them_on_request(client,
                                                                          monkeypatch):
    from app.web.pages import reading

    monkeypatch.setattr(reading, "BACKLINKS_SHOWN", 2)  # instead of writing 101 entries
    hub = create_entry(client, title="Hub", date="2024-01-01", body="x")
    for day in ("2024-02-01", "2024-03-01", "2024-04-01"):
        create_entry(client, title=f"Cites {day}", date=day, body="[[Hub]]")
    def backlinks(url):
        return client.get(url).text.split('<section class="backlinks"')[1].split("</section>")[0]

    newest = backlinks(f"/entries/{hub}/hub")
    assert "Cites 2024-04-01" in newest and "Cites 2024-03-01" in newest
    assert "Cites 2024-02-01" not in newest
    assert 'The newest 2 of 3 entries. <a href="?backlinks=all#backlinks">Show all 3</a>' in newest
    everything = backlinks(f"/entries/{hub}/hub?backlinks=all")
    assert all(f"Cites {day}" in everything for day in ("2024-02-01", "2024-03-01", "2024-04-01"))
    assert "The newest" not in everything


def test_stored_html_is_shown_not_re_rendered(client, db):
    entry_id = create_entry(client, title="Stored", body="original **bold**")
    with db.write() as session:  # if the page rendered on view, this would not show
        session.get(Entry, entry_id).body_html = "<p>from the store</p>"
    assert "from the store" in client.get(f"/entries/{entry_id}/stored").text


def test_hostile_markdown_does_not_reach_the_page_as_markup(client):
    entry_id = create_entry(client, title="Hostile",
                      body='<script>alert(1)</script> <img src=x onerror=alert(1)> '
                           '[x](javascript:alert(1)) <b style="color:red">b</b>')
    response = client.get(f"/entries/{entry_id}/hostile")
    assert_strict_page(response)


def test_new_entry_form_prefills_from_a_missing_wiki_link(client):
    entry_id = create_entry(client, title="Linker", body="Go to [[Not Yet Written]].")
    page = client.get(f"/entries/{entry_id}/linker").text
    href = re.search(r'<a class="wikilink missing" href="([^"]+)"', page)[1]
    form_page = client.get(href.replace("&amp;", "&")).text
    assert 'value="Not Yet Written"' in form_page


# -- letters ------------------------------------------------------------------------------


def test_week_page_lists_the_weeks_entries_and_neighbours(client):
    create_entry(client, title="In W13", date="2024-03-27")
    create_entry(client, title="In W14", date="2024-04-02")
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
    assert count(db, Entry) == 1


def test_this_weeks_page_creates_its_letter(client, db):
    page = client.get(f"/weeks/{THIS_WEEK}").text
    assert "This week&#39;s letter" in page or "This week's letter" in page
    assert count(db, Entry) == 1


@pytest.mark.parametrize("week", ["2024-W54", "2021-W53", "2024W13", "bad", "2024-w13"])
def test_bad_weeks_are_404(client, db, week):
    assert client.get(f"/weeks/{week}").status_code == 404
    assert client.post(f"/weeks/{week}/letter").status_code == 404
    assert count(db, Entry) == 0


# -- site map, tags, search ---------------------------------------------------------------


def test_sitemap_groups_by_year_and_week_with_a_tag_index(client):
    create_entry(client, title="Old one", date="2023-06-01", tags="reading")
    create_entry(client, title="New one", date="2024-03-27", tags="reading gpu")
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
    create_entry(client, title="Tensor parallel", body="column and row splits")
    create_entry(client, title="Other", body="mentions tensor once")
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
    # str.isdigit() says yes to superscripts, which int() refuses (test_fuzz found a 500)
    assert client.get("/search?q=x&offset=%C2%B9").status_code == 400
    assert client.get("/tags/x?offset=%C2%B2").status_code == 400
    assert client.get("/entries/1/edit?base=%C2%B9").status_code in (400, 404)


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
    create_entry(client, title="Known")
    response = client.post("/preview", data={"body": "[[Known]] and [[Unknown]] #tag\n\n"
                                                     "<script>alert(1)</script>"})
    assert response.status_code == 200
    assert 'class="wikilink"' in response.text and 'class="wikilink missing"' in response.text
    assert "<script" not in response.text
    assert client.post("/preview", data={"body": "x" * (entries.MAX_BODY + 1)}).status_code == 422


def test_templates_load_after_every_global_is_registered(app):
    # PageEnvironment (app/web/__init__.py) copies the globals into a template when it is
    # first loaded: none may load inside create_app, before the blueprints add theirs.
    from app.web.pages import chrome

    assert not app.jinja_env.cache
    with app.test_request_context("/"):
        assert app.jinja_env.get_template("base.html").globals["url_for"] is chrome.page_url
        assert "listed_lines" in app.jinja_env.get_template("notes/_macros.html").globals


def test_the_links_built_by_hand_are_the_routes_own(app, db):
    """addresses.action_url and ticking.tick_url build an entry's links without url_for
    (an entry page links to its own, and there are as many as entries): the same paths."""
    from flask import url_for

    from app.web.pages.ticking import tick_url

    with db.write() as session:
        entry = entries.create(session, title="Pipelines", body="a body", author="t",
                               status="published", date=dt.date(2024, 3, 5))
    with app.test_request_context("/"):
        for action, endpoint in zip(addresses.ENTRY_ACTIONS,
                                    ("edit_entry", "history", "confirm_delete"), strict=True):
            assert addresses.action_url(entry, action) == url_for(f"notes.{endpoint}",
                                                                 entry_id=entry.id)
        assert tick_url(entry, 3) == url_for("notes.tick_task", entry_id=entry.id, index=3)
    with pytest.raises(ValueError):
        addresses.action_url(entry, "explode")


READER = """
import sys
from app import create_app
app = create_app({"DATA_DIR": sys.argv[1], "DATABASE_URL": f"sqlite:///{sys.argv[1]}/commonplace.db",
                  "AUTH_MODE": "dev", "TIMEZONE": "UTC"})
client = app.test_client()
for path in sys.argv[2:]:
    status = client.get(path, environ_base={"REMOTE_ADDR": "127.0.0.1"}).status_code
    assert status == 200, (path, status)
print(" ".join(m for m in ("markdown", "pymdownx", "pygments", "nh3") if m in sys.modules))
"""


def test_a_worker_that_only_reads_never_loads_the_renderer(client, data_dir):
    # app/notebook/render loads Python-Markdown and the rest on the first render: a web
    # worker serving stored pages holds ~4 MB less (bench/idle.py). A fresh interpreter,
    # since this one has rendered already.
    entry_id = create_entry(client, title="Stored", tags="kept", body="# A\n\n```py\nx = 1\n```")
    client.get("/")  # this week's letter exists: making it renders its template
    pages = ["/", f"/weeks/{THIS_WEEK}", client.get(f"/entries/{entry_id}").location,
             "/sitemap", "/tags/kept", "/search?q=stored", f"/api/v1/entries/{entry_id}",
             "/api/v1/entries", "/feed.atom"]
    done = subprocess.run([sys.executable, "-c", READER, str(data_dir), *pages], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""


def test_per_request_callables_do_not_pile_up_in_ensure_syncs_answers(app):
    # WebApp keeps ensure_sync's answer per function; after_this_request adds a new
    # function on every request, and those must not be kept for ever.
    from flask import after_this_request

    @app.get("/__one_off")
    def one_off():
        after_this_request(lambda response: response)
        return "ok"

    client = app.test_client()
    for _ in range(1100):
        assert client.get("/__one_off", environ_base={"REMOTE_ADDR": "127.0.0.1"}).text == "ok"
    assert len(app._synced) <= 1024
