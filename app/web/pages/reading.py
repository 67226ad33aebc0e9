"""The notebook's reading pages: home, entry, letter, site map, tags, search, settings.

Views parse the request, call the notebook (entries, letters, browse, search) and render.
Forms that change entries live in editing.py.
"""

from __future__ import annotations

import datetime as dt
import functools
import itertools

from flask import Response, abort, current_app, redirect, render_template, request, url_for
from jinja2 import Environment
from markupsafe import Markup

from app.db import get_reader, get_session
from app.errors import BadQuery
from app.notebook import addresses, browse, isoweeks, letters, search
from app.notebook.entry_rows import EntryRow
from app.notebook.render import pygments_css
from app.web import assets
from app.web.access import author, can_write, readable_entry, require_owner, visible
from app.web.pages.blueprints import notes as bp
from app.web.pages.chrome import current_week, today
from app.web.pages.kept import kept

SEARCH_PAGE = 20

# -- weeks --------------------------------------------------------------------------------


def current_letter():
    """This week's letter, created if it is missing (letters.this_weeks_letter)."""
    return letters.this_weeks_letter(current_app.extensions["db"], get_session(),
                                     current_app.config["TIMEZONE"])[1]


# -- lists and backlinks -------------------------------------------------------------------


def listed_lines(entries: list[EntryRow], show_date: bool = True) -> Markup:
    """The lines of a list of entries (templates/notes/_macros.html entry_item), joined.
    A line shows only its row's columns, and a row is immutable and holds every one of
    them (revision and updated_at included), so the lines made are kept by row: a changed
    entry is a new key, never a stale line. Made afresh, a tag page's lines were most of
    its time (docs/PERFORMANCE.md, *Profiles*); the home, letter and tag pages list the same rows
    view after view. One call for the whole list, not one per line: Jinja's call of a
    global (its checks of the callable) and the app proxy cost more than a kept line."""
    env = current_app.jinja_env
    return Markup("\n  ".join([_line(env, entry, show_date) for entry in entries]))


@functools.lru_cache(maxsize=2048)  # bounded: the lines of the pages read most
def _line(env: Environment, entry: EntryRow, show_date: bool) -> Markup:
    return Markup(env.get_template("notes/_macros.html").module.entry_item(entry, show_date))


bp.add_app_template_global(listed_lines, "listed_lines")


BACKLINKS_SHOWN = 100  # the newest; ?backlinks=all shows every one


def backlink_lines(session, entry: EntryRow) -> tuple[list[tuple[str, str, str, str]], int]:
    """What a page shows of the entries linking to `entry` that the reader may see: lines
    of (address, title, day, context), templates/notes/_macros.html `backlinks_section`,
    and how many there are in all. Made here rather than in the template's loop, whose
    attribute lookups and calls cost ~30 Python calls a line."""
    everything = "all" in request.args.getlist("backlinks")  # .get raises inside if absent
    found, total = browse.newest_backlinks(
        session, entry, 10**9 if everything else BACKLINKS_SHOWN, include_drafts=can_write())
    return [(addresses.entry_url(b), b.title, _longdate(b.date), b.context) for b in found], total


@bp.app_template_filter("localtime")
def _localtime(moment: dt.datetime) -> str:
    """A stored UTC time shown in the notebook's time zone."""
    return isoweeks.local(moment, current_app.config["TIMEZONE"]).strftime("%Y-%m-%d %H:%M")


@bp.app_template_filter("longdate")
@functools.lru_cache(maxsize=4096)  # strftime is slow, and a list shows the same few days
def _longdate(day: dt.date) -> str:
    return f"{day:%a} {day.day} {day:%b %Y}"


@bp.app_template_filter("shortdate")
@functools.lru_cache(maxsize=4096)
def _shortdate(day: dt.date) -> str:
    return day.strftime("%a %d %b")


# -- pages --------------------------------------------------------------------------------


@bp.get("/")
@kept
def home():
    letter = current_letter()
    session = get_session()
    if letter is not None and not visible(letter):
        letter = None  # a draft letter is the owner's until it is published
    recent = browse.recent(session, 15, include_drafts=can_write())
    return render_template("notes/home.html", letter=letter, recent=recent,
                           today=today())


@bp.get("/entries/<int:entry_id>")
@bp.get("/entries/<int:entry_id>/<slug>")
def entry(entry_id: int, slug: str | None = None):
    item = readable_entry(entry_id)
    if item.kind == "week" or slug != item.slug:
        return redirect(addresses.entry_url(item))
    session = get_reader()
    prev, nxt = browse.neighbours(session, item, include_drafts=can_write())
    backlinks, linked = backlink_lines(session, item)
    return render_template("notes/entry.html", entry=item, prev=prev, next=nxt,
                           backlinks=backlinks, linked=linked)


def week_or_404(week: str) -> str:
    try:
        isoweeks.parse_week(week)
    except ValueError as exc:
        abort(404, description=str(exc))
    return week


@bp.get("/weeks/<week>")
@kept
def week(week: str):
    week_or_404(week)
    session = get_session()
    letter = (current_letter() if week == current_week()
              else letters.letter_row(session, week))
    if letter is not None and not visible(letter):
        letter = None
    items = [e for e in letters.week_entries(session, week) if visible(e)]
    backlinks, linked = backlink_lines(session, letter) if letter else ([], 0)
    monday, sunday = isoweeks.week_bounds(week)
    return render_template(
        "notes/week.html", week=week, letter=letter, items=items, backlinks=backlinks,
        linked=linked, monday=monday, sunday=sunday, prev_week=isoweeks.shift_week(week, -7),
        next_week=isoweeks.shift_week(week, 7), is_current=week == current_week(),
    )


@bp.post("/weeks/<week>/letter")
def start_letter(week: str):
    week_or_404(week)
    letters.create_letter(current_app.extensions["db"], week, author())
    return redirect(url_for("notes.week", week=week), code=303)


# A year with more entries than this is shown as its weeks (letter, how many entries, a
# link to the week's page that lists them) rather than every title: the page stays the
# same size however many entries a year holds.
SITEMAP_TITLES = 400


@bp.get("/sitemap")
@kept
def sitemap():
    """Every page by ISO year and week, one year at a time (a page stays small however
    long the notebook grows), and the index of tags."""
    session = get_session()
    drafts = can_write()
    years = browse.years(session, include_drafts=drafts)
    year = request.args.get("year") or (years[0][0] if years else "")
    if year and not (len(year) == 4 and year.isdecimal()):
        abort(400, description="year is four digits, e.g. 2024")
    compact = dict(years).get(year, 0) > SITEMAP_TITLES
    rows = browse.of_year(session, year, include_drafts=drafts,
                          letters_only=compact) if year else []
    by_week = {wk: list(group) for wk, group in itertools.groupby(rows, lambda e: e.iso_week)}
    counts = {}
    if compact:
        counts = browse.week_counts(session, year, include_drafts=drafts)
    # (week, its letter or None, its entries): the week's heading is its letter's link and
    # the list holds the entries, so the letter is listed once.
    weeks_of_year = [
        (wk, next((e for e in items if e.kind == "week"), None),
         [e for e in items if e.kind != "week"])
        for wk, items in ((wk, by_week.get(wk, []))
                          for wk in sorted(set(counts) | set(by_week), reverse=True))]
    return render_template("notes/sitemap.html", years=years, year=year,
                           weeks_of_year=weeks_of_year, week_counts=counts,
                           count=sum(n for _, n in years),
                           tags=browse.tag_counts(session, include_drafts=drafts))


TAG_PAGE = 50


@bp.get("/tags/<path:tag>")
@kept
def tag(tag: str):
    offset = _offset()
    items, total = browse.tagged(get_session(), tag.lower(), limit=TAG_PAGE, offset=offset,
                                  include_drafts=can_write())
    if not total:
        abort(404, description=f"no entries are tagged #{tag}")
    return render_template("notes/tag.html", tag=tag.lower(), items=items, total=total,
                           offset=offset, page_size=TAG_PAGE)


def _offset() -> int:
    raw = request.args.get("offset", "0")
    if not raw.isdecimal() or int(raw) > 100_000:
        abort(400, description="offset must be a whole number up to 100000")
    return int(raw)


@bp.get("/search")
def search_page():
    q = request.args.get("q", "")
    offset = _offset()
    results, error = None, None
    try:
        results = search.search(get_session(), q, limit=SEARCH_PAGE, offset=offset,
                                include_drafts=can_write(),
                                seconds=current_app.config["SEARCH_TIME_LIMIT_S"])
    except BadQuery as exc:
        error = str(exc)
    body = render_template("notes/search.html", q=q, results=results, error=error,
                           offset=offset, page_size=SEARCH_PAGE)
    return body, 400 if error else 200


@bp.route("/settings/template", methods=["GET", "POST"])
def settings_template():
    require_owner()
    session = get_session()
    error, saved = None, request.args.get("saved") == "1"
    if request.method == "POST":
        text = request.form.get("template", "").replace("\r\n", "\n")
        if len(text) > letters.MAX_TEMPLATE:
            error = f"the template is longer than {letters.MAX_TEMPLATE} characters"
        else:
            letters.set_letter_template(session, text)
            session.commit()
            return redirect(url_for("notes.settings_template", saved=1), code=303)
    else:
        text = letters.letter_template(session)
    body = render_template("notes/settings.html", template=text, error=error, saved=saved,
                           limit=letters.MAX_TEMPLATE)
    return body, 422 if error else 200


@functools.cache
def _pygments_css() -> str:
    return pygments_css()


@bp.get("/pygments.css")
def pygments_stylesheet():
    """Linked with ?v=<its hash> (chrome.site_links): kept a year, as the static files are."""
    response = Response(_pygments_css(), mimetype="text/css")
    response.headers["Cache-Control"] = assets.cache_control(assets.code_stylesheet_version())
    return response
