"""Every file of the public site, built in memory from the notebook: pages, tag pages,
the site map, the feed, the run cards' images, the attachments the pages use, the
search index, and the stylesheet and search script. Nothing here reads a private entry's
text: the pages are made from the public entries (selection.py) and their HTML made
public (public_html.py)."""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import jinja2
import sqlalchemy as sa
from sqlalchemy.orm import Session

from app.journal.views import cards
from app.models import Attachment, Run
from app.notebook.attachments import path_for
from app.publishing import feed
from app.publishing import public_html as html
from app.publishing.public_html import Sources, Used, rewrite
from app.publishing.selection import Public, entry_path, public, tag_path

# (app.ROOT is the same folder, but importing the package `app` reaches up to the web)
TEMPLATES = Path(__file__).resolve().parents[2] / "templates" / "publish"
HOME_LETTERS = 12
HOME_NOTES = 12
SEARCH_TEXT = 4000  # characters of an entry's text in the search index


@dataclass
class Options:
    data_dir: Path
    base_url: str = ""  # checked (feed.check_base_url); "" writes no feed
    title: str = "Commonplace"
    private_tags: tuple[str, ...] = ()


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
                             trim_blocks=True, lstrip_blocks=True,
                             undefined=jinja2.StrictUndefined)
    env.globals.update(entry_path=entry_path, tag_path=tag_path)
    return env


def _stored_attachments(session: Session) -> set[str]:
    return set(session.scalars(sa.select(Attachment.sha256).distinct()))


def build(session: Session, options: Options) -> dict[str, bytes]:
    """The site's files: relative path → bytes. The same notebook gives the same bytes."""
    site = public(session, options.private_tags)
    sources = Sources(site, _stored_attachments(session), _card_images(session, site))
    used = Used()
    inner = {e.id: rewrite(e.body_html, e.id, sources, used, "../") for e in site.entries}
    env = _environment()
    common = {"title": options.title, "feed": bool(options.base_url), "site": site}
    files: dict[str, bytes] = {}

    def page(path: str, template: str, **context) -> None:
        root = "../" * path.count("/")
        files[path] = env.get_template(template).render(root=root, **common, **context).encode()

    by_target = used.entries
    for entry in site.entries:
        linked_from = [site.by_id[s] for s in sorted(by_target.get(entry.id, ()), key=lambda s: (
            site.by_id[s].date, s), reverse=True) if s != entry.id]
        page(entry_path(entry), "entry.html", entry=entry, body=inner[entry.id],
             tags=site.tags[entry.id], linked_from=linked_from)
    letters = [e for e in site.entries if e.kind == "week"]
    notes = [e for e in site.entries if e.kind == "entry"]
    newest = letters[0] if letters else None
    page("index.html", "home.html", newest=newest, letters=letters[1:HOME_LETTERS + 1],
         notes=notes[:HOME_NOTES],
         body=rewrite(newest.body_html, newest.id, sources, Used(), "") if newest else "")
    page("sitemap.html", "sitemap.html", years=_by_year_and_week(site),
         tags=sorted(site.by_tag.items()))
    for tag, tagged in site.by_tag.items():
        page(tag_path(tag), "tag.html", tag=tag, tagged=tagged)
    page("search.html", "search.html")
    files["search.json"] = _search_index(site, inner)
    for static in ("style.css", "search.js"):
        files[static] = (TEMPLATES / static).read_bytes()
    for run_id in sorted(used.runs):
        files[html.card_image_path(run_id)] = sources.cards[run_id].encode()
    for sha, name in sorted(used.attachments):
        stored = path_for(options.data_dir, sha)
        if stored.is_file():
            files[html.attachment_path(sha, name)] = stored.read_bytes()
    if options.base_url:
        absolute = [(e, entry_path(e), rewrite(e.body_html, e.id, sources, Used(),
                                               options.base_url), site.tags[e.id])
                    for e in sorted(site.entries, key=lambda e: (e.updated_at, e.id),
                                    reverse=True)]
        files["feed.atom"] = feed.build(absolute, options.base_url, options.title)
    return files


def _search_index(site: Public, inner: dict[int, str]) -> bytes:
    """The public entries' titles and words, for search.js (the only text in it is text
    the public pages show)."""
    found = [{"t": e.title, "u": entry_path(e), "d": e.date.isoformat(),
              "x": html.plain_text(inner[e.id])[:SEARCH_TEXT]} for e in site.entries]
    return json.dumps(found, ensure_ascii=False, separators=(",", ":")).encode()


def _card_images(session: Session, site: Public) -> dict[int, str]:
    """The standalone SVG of each run card the public entries show (those that draw one)."""
    images = {}
    for run_id in sorted(set().union(*(html.card_runs(e.body_html) for e in site.entries))):
        run = session.get(Run, run_id)
        drawn = cards.image(run) if run is not None else None
        if drawn is not None:
            images[run_id] = drawn[0]
    return images


def _by_year_and_week(site: Public) -> list[tuple[int, list[tuple[str, list]]]]:
    """The public entries by year, then ISO week, newest first; a week's letter first."""
    years: dict[int, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for entry in site.entries:
        years[int(entry.iso_week[:4])][entry.iso_week].append(entry)
    return [(year, [(week, sorted(found, key=lambda e: (e.kind != "week", e.date)))
                    for week, found in sorted(weeks.items(), reverse=True)])
            for year, weeks in sorted(years.items(), reverse=True)]
