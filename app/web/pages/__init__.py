"""The HTML pages, server-rendered from templates/ and readable without JavaScript.

    reading.py         home, entry, letter, site map, tags, search, settings; a list's
                       lines (listed_lines), kept
    chrome.py          what every page shares: header, menu and footer (kept per
                       variant), the template context, url_for remembered
    kept.py            home, letter, site map and tag pages kept whole until a commit
    editing.py         new / edit (with the merge view), delete, history, diff, restore, preview
    ticking.py         task boxes ticked from a rendered page
    diffing.py         line and word diffs for history and the merge view
    served.py          /feed.atom, /attachments/…, /healthz
    offline.py         /sw.js (the service worker), /offline, the offline set's list
    runs.py            experiment catalogue, new-run form, run list, run page, compare
    experiment.py      one experiment's page: what it teaches, parameters, recent runs
    learning.py        what each experiment shows, its diagram, a first run, the path through
    schedules.py       schedules: list and create, one schedule, delete
    trends.py          a schedule's (or one parameter set's) numbers over its runs
    param_forms.py     forms generated from the lab's parameter schemas
    run_summary.py     what a run page says beyond its card (durations, checks, headlines)
    sharding.py        the sharding view on the run page and the new-run form
    timeline.py        the run page's measured step, traffic heat-map and trace link
    calculator.py      /calculator: the what-if calculator
    cards.py           /runs/<id>/card.svg: a card's charts as an image, for the feed

Views parse the request, call the notebook or the journal, and render.
"""

from app.web.pages import (  # noqa: F401
    calculator,
    cards,
    editing,
    experiment,
    offline,
    reading,
    runs,
    schedules,
    served,
    sharding,
    ticking,
    timeline,
    trends,
)
from app.web.pages.blueprints import experiments, notes

__all__ = ["experiments", "notes"]
