"""What every page shares: the header, menu and footer (base.html's chrome, rendered once
per variant and kept), the context every template gets, and the globals templates build
links with (url_for remembered; an entry's, a letter's, a tag's paths by hand). Each look
through Flask's request or app proxy costs three calls, and these run on every page, so
they look the request up once.
"""

from __future__ import annotations

import datetime as dt
import functools

from flask import Flask, Request, current_app, g, request, url_for
from jinja2 import Environment
from markupsafe import Markup

from app.notebook import addresses, isoweeks
from app.web.access import can_write
from app.web.assets import asset_version, code_stylesheet_version
from app.web.pages.blueprints import notes as bp


def today() -> dt.date:
    return isoweeks.today(current_app.config["TIMEZONE"])


def current_week() -> str:
    return isoweeks.iso_week(today())


def asset_url(name: str) -> str:
    """A static file's URL with its content hash: cached for a year, never served stale
    (app/web/assets.py)."""
    return page_url("static", filename=name, v=asset_version(current_app, name))


URL_CACHE_SIZE = 4096


def page_url(endpoint: str, **values) -> str:
    """url_for for templates, remembered: a page's header, menu and links ask for the same
    few dozen URLs on every request, and building one costs more than the rest of a small
    template (docs/PERFORMANCE.md, *Profiles*). The
    URL depends only on the endpoint, its values and the mount point (script root); a
    relative endpoint or an option (_external, _anchor ...) is built afresh each time."""
    try:
        key = (request.script_root, endpoint, *values.items())
        cache = current_app.extensions["page_urls"]
        return cache[key]
    except (TypeError, RuntimeError):  # an unhashable value; no request (a CLI, a job)
        return url_for(endpoint, **values)
    except KeyError:  # not built yet (or no cache yet)
        url = url_for(endpoint, **values)
        if not (endpoint.startswith(".") or any(k.startswith("_") for k in values)):
            cache = current_app.extensions.setdefault("page_urls", {})
            if len(cache) >= URL_CACHE_SIZE:
                cache.clear()
            cache[key] = url
        return url


SITE_ENDPOINTS = {  # what every page's header and footer link to (templates/base.html)
    "home": "notes.home", "sitemap": "notes.sitemap", "search": "notes.search_page",
    "feed": "notes.feed", "manifest": "notes.manifest",
    "new_entry": "notes.new_entry", "letter_template": "notes.settings_template",
    "experiments": "experiments.catalogue", "runs": "experiments.run_list",
    "schedules": "experiments.schedule_list", "calculator": "experiments.calculator",
}
SITE_ASSETS = {"css": "app.css", "js": "app.js", "offline_js": "offline-page.js",
               "icon": "icon.svg", "icon_png": "icon-32.png",
               "touch_icon": "apple-touch-icon.png"}


def site_links(app: Flask, script_root: str, week: str) -> dict[str, str]:
    """The header's and footer's URLs, built once per mount point and week: base.html
    asked page_url for them on every request, each call looking up the request and the
    app through Flask's proxies (docs/PERFORMANCE.md, *Profiles*)."""
    key = (script_root, week)
    kept = app.extensions.setdefault("site_links", {})
    if key not in kept:
        if len(kept) >= 64:  # a new week, or a new mount point: forget the old ones
            kept.clear()
        links = {name: url_for(endpoint) for name, endpoint in SITE_ENDPOINTS.items()}
        links.update({name: asset_url(file) for name, file in SITE_ASSETS.items()})
        links["week"] = url_for("notes.week", week=week)
        links["pygments"] = url_for("notes.pygments_stylesheet", v=code_stylesheet_version())
        kept[key] = links
    return kept[key]


def nav_section(app: Flask, req: Request, week: str) -> str:
    """The item of the header's menu that the page belongs to ("" for none): one place,
    so a page shown after a form error (a POST's endpoint) still marks its own item."""
    endpoint = req.endpoint or ""
    view = app.view_functions.get(endpoint)
    if getattr(view, "__module__", "") == "app.web.pages.schedules":
        return "schedules"
    if endpoint in ("experiments.catalogue", "experiments.experiment_page",
                    "experiments.new_run", "experiments.create_run"):
        return "experiments"
    if endpoint == "experiments.calculator":
        return "calculator"
    if endpoint.startswith("experiments."):
        return "runs"
    if endpoint == "notes.week" and (req.view_args or {}).get("week") == week:
        return "week"
    return {"notes.home": "home", "notes.sitemap": "sitemap", "notes.tag": "sitemap"}.get(
        endpoint, "")


def site_chrome(week: str, writer: bool, identity) -> dict[str, Markup]:
    """base.html's head links, header and footer (templates/_site.html). A page's chrome
    depends only on the links (mount point and week), which menu item is the page's,
    whether it has its own search box and who reads it, so each variant is rendered once
    and kept: the loop over the menu and its escapes were most of base.html's time on
    every page. Made with the page's context (_page_context), once a request, and shown
    as three strings: base.html calling a function for each part, which looked the
    request and the app up again, showed in the entry page's profile
    (docs/PERFORMANCE.md, *Profiles*)."""
    app, req = current_app._get_current_object(), request._get_current_object()
    env, root = app.jinja_env, req.script_root
    header = (nav_section(app, req, week), req.endpoint != "notes.search_page", writer)
    return {"head": _chrome(env, "head", root, week, ()),
            "header": _chrome(env, "header", root, week, header),
            "footer": _chrome(env, "footer", root, week,
                              (identity.login if identity else "", writer))}


@functools.lru_cache(maxsize=256)
def _chrome(env: Environment, part: str, script_root: str, week: str, variant: tuple) -> Markup:
    macro = getattr(env.get_template("_site.html").module, part)
    return Markup(macro(site_links(env.app, script_root, week), *variant))


@bp.app_context_processor
def _page_context() -> dict:
    week, writer, identity = current_week(), can_write(), g.get("identity")
    return {"can_write": writer, "identity": identity, "this_week": week,
            "asset_url": asset_url, "chrome": site_chrome(week, writer, identity)}


# Globals rather than context: imported macros do not see a template's context.
bp.add_app_template_global(page_url, "url_for")
bp.add_app_template_global(addresses.entry_url, "entry_url")
bp.add_app_template_global(addresses.tag_url, "tag_url")
bp.add_app_template_global(addresses.week_url, "week_url")
bp.add_app_template_global(addresses.action_url, "action_url")
