"""Every reading page costs the same however big the notebook is (issue 14).

Structural, not timing: the cost of a page view is counted as the SQLite virtual-machine
instructions its statements execute (a progress handler on every connection) and the
statements it sends. Two notebooks of the same density (an entry a day, so a week's and a
year's pages hold the same entries), one five times longer than the other, must cost the
same per page: an index walked from end to end, a count over every entry or a query the
planner answers with the wrong index shows up here as instructions that grow with N.

Counts over the whole notebook (the site map's years and tags, a tag's total) are kept by
the process until the notebook changes (app/notebook/browse.py); each page is viewed once
to warm them, then counted. Home, the letter, the site map and tag pages are kept whole between
views (app/web/pages/kept.py), so the counted view asks for another URL of the same page
(an extra query argument the views ignore): a rendering, not the kept copy.
"""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa

from app.notebook.isoweeks import iso_week

SMALL, BIG = 400, 2000
LAST_DAY = dt.date(2024, 12, 28)  # ISO year 2024's last day: it holds 362 entries in both
TICK = 10  # instructions per progress-handler call
RARE = {3, 100, 170, 250, 390}  # the same five entries carry #rare in both notebooks


def seed(db, n: int) -> None:
    now = dt.datetime(2025, 1, 1)
    entries, tags, links = [], [], []
    for i in range(n):
        day = LAST_DAY - dt.timedelta(days=i)
        entries.append({"id": i + 1, "date": day, "week": iso_week(day), "title": f"Note {i}",
                        "slug": f"note-{i}", "tags": "ml rare" if i in RARE else "ml",
                        "now": now})
        tags.append({"id": i + 1, "tag": "ml"})
        if i in RARE:
            tags.append({"id": i + 1, "tag": "rare"})
        links.append({"id": i + 1, "key": f"note {(i * 7) % n}"})
    with db.engine.begin() as conn:
        conn.execute(sa.text(
            "INSERT INTO entry (id, kind, date, iso_week, title, slug, body_md, body_html, "
            "toc_html, tags, status, revision, created_at, updated_at) VALUES (:id, 'entry', "
            ":date, :week, :title, :slug, 'text', '<p>text</p>', '', :tags, 'published', 1, "
            ":now, :now)"), entries)
        conn.execute(sa.text("INSERT INTO entry_tag (entry_id, tag) VALUES (:id, :tag)"), tags)
        conn.execute(sa.text("INSERT INTO link (source_id, target_key, text, context) "
                             "VALUES (:id, :key, 'x', 'a link')"), links)


PAGES = {
    "home": "/",
    "entry": "/entries/200/note-199",
    "api entry": "/api/v1/entries/200",
    "this week's letter": "/weeks/{this_week}",
    "a past week": "/weeks/2024-W30",
    "site map": "/sitemap",
    "site map, a year": "/sitemap?year=2024",
    "common tag": "/tags/ml",
    "rare tag": "/tags/rare",
    "api tags": "/api/v1/tags",
}


def costs(make_app, n: int, kept: bool = False) -> dict[str, tuple[int, int]]:
    """page -> (VM instructions / TICK, statements) of its second view: rendered afresh,
    or with `kept`, the same URL again."""
    app = make_app()
    db = app.extensions["db"]
    seed(db, n)
    ticks, statements = [0], [0]

    def tick() -> int:
        ticks[0] += 1
        return 0

    def sent(sql: str) -> None:
        if sql.split(None, 1)[0].upper() == "SELECT":  # not BEGIN, ROLLBACK, PRAGMA
            statements[0] += 1

    def counted(dbapi_conn, _record) -> None:
        dbapi_conn.set_progress_handler(tick, TICK)
        # on sqlite3 itself: the pages' prepared statements bypass SQLAlchemy's events
        dbapi_conn.set_trace_callback(sent)

    sa.event.listen(db.engine, "connect", counted)
    db.engine.dispose()  # every connection from now on counts
    client = app.test_client()
    this_week = iso_week(dt.datetime.now(dt.UTC).date())
    result = {}
    for name, path in PAGES.items():
        path = path.format(this_week=this_week)
        assert client.get(path).status_code == 200, path  # warm: caches, the new letter
        client.get(path)  # the first view of home made the week's letter: that one is not kept
        if not kept:
            path += ("&" if "?" in path else "?") + "again=1"
        ticks[0] = statements[0] = 0
        assert client.get(path).status_code == 200, path
        result[name] = (ticks[0], statements[0])
    return result


def test_no_reading_page_costs_more_in_a_bigger_notebook(tmp_path, make_app):
    small = costs(make_app, SMALL)
    # a second, bigger notebook in its own directory
    big_dir = tmp_path / "big"
    big = costs(lambda **c: make_app(DATA_DIR=big_dir,
                                     DATABASE_URL=f"sqlite:///{big_dir}/c.db", **c), BIG)
    grew = {page: (small[page], big[page]) for page in PAGES
            if big[page][0] > 1.2 * small[page][0] + 5 or big[page][1] != small[page][1]}
    assert not grew, f"(instructions/{TICK}, statements) at N={SMALL} vs N={BIG}: {grew}"


def test_a_kept_page_reads_nothing_but_the_notebooks_version(make_app):
    """A kept page viewed again is answered from the kept copy: one SELECT (the notebook's
    version) and a few VM instructions. The pages that are not kept still cost a
    rendering's statements."""
    again = costs(make_app, SMALL, kept=True)
    for page in ("home", "this week's letter", "a past week", "site map", "site map, a year",
                 "common tag", "rare tag"):
        assert again[page][1] == 1 and again[page][0] < 5, (page, again[page])
    # the entry; which links reach it (browse.reached_by); its newest backlinks; neighbours
    assert again["entry"][1] == 4 and again["api entry"][1] >= 1


def test_a_year_too_full_to_list_shows_its_weeks_with_counts(make_app):
    app = make_app()
    db = app.extensions["db"]
    now = dt.datetime(2025, 1, 1)
    rows = [{"id": i + 1, "date": dt.date(2024, 1, 1) + dt.timedelta(days=i // 3),
             "title": f"Note {i}", "slug": f"note-{i}", "now": now} for i in range(450)]
    for row in rows:
        row["week"] = iso_week(row["date"])
    with db.engine.begin() as conn:
        conn.execute(sa.text(
            "INSERT INTO entry (id, kind, date, iso_week, title, slug, body_md, body_html, "
            "toc_html, tags, status, revision, created_at, updated_at) VALUES (:id, 'entry', "
            ":date, :week, :title, :slug, '', '', '', '', 'published', 1, :now, :now)"), rows)
    client = app.test_client()
    client.post("/weeks/2024-W05/letter")
    page = client.get("/sitemap?year=2024").text
    assert "(451)" in page and "Note 7" not in page  # no titles: the year holds too many
    assert 'href="/weeks/2024-W01"' in page and 'href="/weeks/2024-W22"' in page
    assert "21 entries" in page and "letter" in page  # 2024-W01: 7 days, 3 a day
    small = client.get("/sitemap?year=2025").text  # a year that fits still lists titles
    assert "Nothing in 2025" in small
