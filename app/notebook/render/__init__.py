"""The one markdown pipeline: markdown → HTML → nh3 sanitizer → trusted embeds.

Everything that turns a note's markdown into HTML goes through `render`; nothing else
in the app should call Python-Markdown or a sanitizer directly.
"""

from .highlight import pygments_css
from .pipeline import Rendered, WikiLink, render

__all__ = ["Rendered", "WikiLink", "pygments_css", "render"]
