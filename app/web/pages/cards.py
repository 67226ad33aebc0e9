"""A run card's charts as a standalone SVG, /runs/<id>/card.svg: what the Atom feed shows
in place of the card's inline charts, which feed readers drop (app/notebook/atom.py).

Readable by whoever may read the feed: owners and viewers, and a feed token (in the URL,
as for /feed.atom: app/web/auth) for a run whose card is in a published entry, which alone
may be loaded from another origin (a feed reader's page). The SVG is
presentation attributes only, under its own CSP (nothing runs, nothing loads), and named
by its content hash: the card links ?v=<hash>, and that address never changes content.
"""

import sqlalchemy as sa
from flask import Response, abort, g, request

from app.db import get_session
from app.journal.views import cards
from app.models import Entry, Run
from app.web.pages.blueprints import experiments as bp

IMAGE_CSP = "default-src 'none'; style-src 'unsafe-inline'; sandbox"


def _in_a_published_entry(session, run_id: int) -> bool:
    """Whether a published entry shows the run's card image (what the feed can show)."""
    return session.scalar(sa.select(Entry.id).where(
        Entry.status == "published",
        Entry.body_html.contains(f'data-feed-img="/runs/{run_id}/card.svg?')).limit(1)) \
        is not None


@bp.get("/runs/<int:run_id>/card.svg")
def card_image(run_id: int):
    session = get_session()
    run = session.get(Run, run_id)
    identity = getattr(g, "identity", None)
    if run is None or (identity is not None and identity.role == "feed"
                       and not _in_a_published_entry(session, run_id)):
        abort(404)
    drawn = cards.image(run)
    if drawn is None:
        abort(404)
    svg, digest = drawn
    response = Response(svg, mimetype="image/svg+xml")
    response.set_etag(digest)
    response.headers["Content-Security-Policy"] = IMAGE_CSP
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Cache-Control"] = ("private, max-age=31536000, immutable"
                                         if request.args.get("v") == digest
                                         else "private, no-cache")
    if identity is not None and identity.role == "feed":
        # A feed reader shows the feed on a page of its own origin (a web reader's, or a
        # local app's), where same-origin would leave a broken image. Only for the feed's
        # token and a card a published entry shows (checked above): what the feed already
        # carries, readable by its address, and nothing an owner's request returns.
        response.headers["Cross-Origin-Resource-Policy"] = "cross-origin"
    return response.make_conditional(request)
