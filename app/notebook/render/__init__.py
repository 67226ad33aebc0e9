"""The one markdown pipeline: markdown → HTML → nh3 sanitizer → trusted embeds.

Everything that turns a note's markdown into HTML goes through `render`; nothing else
in the app should call Python-Markdown or a sanitizer directly.
"""

from .highlight import pygments_css
from .pipeline import Rendered, Resolved, WikiLink, hide_draft_links, render

# Raised whenever a change here alters the HTML a note renders to: entries store their HTML
# at save time, and `commonplace up` / `db upgrade` render every stored note again once
# when this moves (app/notebook/rerender.py). 2: task boxes carry their number.
# 3: links to drafts are marked (hidden from readers who may not see drafts).
# 4: run cards carry charts, lessons and a part the feed shows as an image.
VERSION = 4

__all__ = ["VERSION", "Rendered", "Resolved", "WikiLink", "hide_draft_links", "pygments_css",
           "render"]
