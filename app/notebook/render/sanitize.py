"""The sanitizer: nh3 (Rust ammonia) run on the *output* of Python-Markdown.

Python-Markdown does not sanitize, and escaping raw HTML alone does not stop
`[x](javascript:...)`, so every byte of rendered user content passes through this
allowlist. It names exactly what the pipeline's features produce, plus harmless raw
HTML (`<kbd>`, `<sup>`, `<details>`). Anything not listed is dropped; scripting and
embedding elements are dropped together with their content.
"""

import re
import threading
from collections.abc import Callable

import nh3
from pygments.token import STANDARD_TYPES

# Marks the anchors the pipeline itself made (wiki links, tags) so they can be found in
# the sanitized output. Kept only when it carries this render's secret nonce, and
# removed before the HTML leaves the pipeline.
MARKER_ATTR = "data-cp-ref"

HEADINGS = ("h1", "h2", "h3", "h4", "h5", "h6")

# MathML Core, as much of it as math.py's latex2mathml writes. No href (Firefox follows
# one on any MathML element), no annotation-xml (HTML inside MathML, the usual way past a
# sanitizer), no style. ammonia checks namespaces, so an <mi> outside <math> goes.
MATHML_ATTRIBUTES: dict[str, set[str]] = {
    "math": {"display"},
    "mrow": set(), "mn": set(), "mtext": set(), "msqrt": set(), "mroot": set(),
    "msub": set(), "msup": set(), "msubsup": set(), "mtable": set(), "mtr": set(),
    "mstyle": set(), "mphantom": set(),
    "mi": {"mathvariant"},
    "mo": {"fence", "form", "largeop", "lspace", "rspace", "maxsize", "minsize",
           "movablelimits", "separator", "stretchy", "symmetric"},
    "mfrac": {"linethickness"},
    "mspace": {"width", "height", "depth"},
    "mpadded": {"width", "height", "depth", "lspace", "voffset"},
    "mover": {"accent"},
    "munder": {"accentunder"},
    "munderover": {"accent", "accentunder"},
    "mtd": {"columnspan", "rowspan"},
}  # fmt: skip
MATHML_GLOBAL = {"displaystyle", "scriptlevel", "mathcolor", "mathbackground", "mathsize"}

TAGS = {
    "a", "abbr", "b", "blockquote", "br", "caption", "cite", "code", "dd", "del",
    "details", "dfn", "div", "dl", "dt", "em", "figcaption", "figure", "hr", "i", "img",
    "input", "ins", "kbd", "li", "mark", "ol", "p", "pre", "q", "s", "samp", "small",
    "span", "strong", "sub", "summary", "sup", "table", "tbody", "td", "tfoot", "th",
    "thead", "time", "tr", "u", "ul", "var", "wbr", *HEADINGS, *MATHML_ATTRIBUTES,
}  # fmt: skip

# Removed *with* their content: their text is never meant to be read as prose.
CLEAN_CONTENT_TAGS = {
    "script", "style", "template", "noscript", "iframe", "object", "embed", "applet",
    "svg", "noembed", "noframes", "xmp", "textarea", "select", "title",
}  # fmt: skip

ATTRIBUTES: dict[str, set[str]] = {
    "a": {"href", "title", MARKER_ATTR},
    "abbr": {"title"},
    "dfn": {"title"},
    "img": {"src", "alt", "title", "width", "height"},
    "ol": {"start", "reversed", "id"},
    "td": {"colspan", "rowspan"},
    "th": {"colspan", "rowspan", "scope"},
    "input": {"checked", MARKER_ATTR},  # the mark numbers task boxes (see pipeline)
    "details": {"open"},
    "time": {"datetime"},
    # ids: heading anchors (toc), footnotes and blocks (`^block`); see _ID_RE.
    "li": {"id"},
    "sup": {"id"},
    "p": {"id"},
    "ul": {"id"},
    "blockquote": {"id"},
    "table": {"id"},
    **{h: {"id"} for h in HEADINGS},
    **{tag: names | MATHML_GLOBAL for tag, names in MATHML_ATTRIBUTES.items()},
}

_ALIGN = {"align": {"left", "center", "right"}}
TAG_ATTRIBUTE_VALUES = {"th": _ALIGN, "td": _ALIGN}

# Task-list checkboxes are the only reason <input> is allowed: every input, whatever
# the user wrote, comes out as a disabled checkbox.
SET_TAG_ATTRIBUTE_VALUES = {"input": {"type": "checkbox", "disabled": ""}}

ADMONITION_TYPES = {
    "note", "tip", "hint", "important", "info", "warning", "caution", "attention",
    "danger", "error", "bug", "success", "question", "failure", "example", "quote",
    "abstract", "seealso", "todo",
}  # fmt: skip

# Obsidian's callouts (callouts.py): a box per type, foldable ones as <details>.
CALLOUT_CLASSES = {
    "callout", "callout-note", "callout-abstract", "callout-info", "callout-todo",
    "callout-tip", "callout-success", "callout-question", "callout-warning",
    "callout-failure", "callout-danger", "callout-bug", "callout-example", "callout-quote",
}  # fmt: skip

PYGMENTS_CLASSES = {cls for cls in STANDARD_TYPES.values() if cls}

# `class` is allowed only through this per-tag list of names (ammonia forbids listing
# `class` in ATTRIBUTES as well), so user HTML cannot borrow arbitrary page classes.
ALLOWED_CLASSES = {
    "a": {"wikilink", "missing", "draft", "tag", "headerlink", "footnote-ref",
          "footnote-backref"},
    "div": {"highlight", "toc", "footnote", "admonition", *ADMONITION_TYPES, *CALLOUT_CLASSES,
            "note-embed"},
    "details": CALLOUT_CLASSES,
    "p": {"admonition-title", "callout-title", "note-embed-source"},
    "summary": {"callout-title"},
    "span": PYGMENTS_CLASSES | {"missing-embed"},
    "ul": {"task-list"},
    "li": {"task-list-item"},
}

URL_SCHEMES = {"http", "https", "mailto"}
IMAGE_URL_SCHEMES = {"http", "https"}

# Our ids are "h-<slug>" (headings), "b-<id>" (blocks) and "fn:<n>" / "fnref:<n>"
# (footnotes). A user id like "log" could otherwise collide with (or clobber) an id the
# page template uses.
_ID_RE = re.compile(r"^(?:h-|b-|fn:|fnref:)\S+$")
_DIGITS_RE = re.compile(r"^\d{1,5}$")
# MathML values are lengths, colours and keywords; nothing with quotes, parentheses or
# colons, so no url(...) and no scheme.
_MATH_LENGTH_RE = re.compile(r"^[+-]?(?:\d{1,4}(?:\.\d{0,4})?|\.\d{1,4})(?:em|ex|px|pt|mu|%)?$")
_MATH_COLOUR_RE = re.compile(r"^(?:#[0-9a-fA-F]{3,8}|[a-zA-Z]{1,20})$")
_MATH_WORD_RE = re.compile(r"^(?:[a-z-]{1,20}|-?\d{1,2})$")
_MATH_LENGTHS = {"width", "height", "depth", "lspace", "rspace", "voffset", "minsize",
                 "maxsize", "linethickness", "mathsize"}
_SCHEME_RE = re.compile(r"^([a-z][a-z0-9+.-]*):")
_URL_NOISE_RE = re.compile(r"[\x00-\x20]")


def _url_ok(value: str, schemes: set[str]) -> bool:
    # nh3 already checks schemes the way browsers parse URLs. This stricter second look
    # also ignores *inner* spaces and controls ("java    script:" is a harmless relative
    # URL to a browser, but nothing we need), and applies per-attribute schemes: nh3 has
    # one scheme list for every URL attribute, and images must not be mailto:.
    if value[:1] in ("#", "/"):  # a fragment or a path (most links here): no scheme
        return True
    m = _SCHEME_RE.match(_URL_NOISE_RE.sub("", value).lower())
    return m is None or m.group(1) in schemes


def _math_value(attr: str, value: str) -> str | None:
    if attr in _MATH_LENGTHS:
        ok = _MATH_LENGTH_RE.match(value) or _MATH_WORD_RE.match(value)
    elif attr in ("mathcolor", "mathbackground"):
        ok = _MATH_COLOUR_RE.match(value)
    else:
        ok = _MATH_WORD_RE.match(value)
    return value if ok else None


def _marker(value: str) -> str | None:
    prefix = getattr(_rendering, "marker_prefix", None)
    return value if prefix and value.startswith(prefix) else None


def _digits(value: str) -> str | None:
    return value if _DIGITS_RE.match(value.strip()) else None


# attribute -> its check (the value, or None to drop it); an attribute not named passes
_CHECKS: dict[str, Callable[[str], str | None]] = {
    MARKER_ATTR: _marker,
    "id": lambda value: value if _ID_RE.match(value) else None,
    **dict.fromkeys(("width", "height", "start", "colspan", "rowspan"), _digits),
    "href": lambda value: value if _url_ok(value, URL_SCHEMES) else None,
    "src": lambda value: value if _url_ok(value, IMAGE_URL_SCHEMES) else None,
}


def _attribute_filter(tag: str, attr: str, value: str) -> str | None:
    # nh3 calls this for every attribute it keeps: one lookup, not a test per name
    if tag in MATHML_ATTRIBUTES:
        return _math_value(attr, value)
    check = _CHECKS.get(attr)
    return value if check is None else check(value)


_OPTIONS = {
    "tags": TAGS,
    "clean_content_tags": CLEAN_CONTENT_TAGS,
    "attributes": ATTRIBUTES,
    "attribute_filter": _attribute_filter,
    "tag_attribute_values": TAG_ATTRIBUTE_VALUES,
    "set_tag_attribute_values": SET_TAG_ATTRIBUTE_VALUES,
    "allowed_classes": ALLOWED_CLASSES,
    "url_schemes": URL_SCHEMES,
    "link_rel": "noopener noreferrer",
    "strip_comments": True,
}

# One sanitizer built once (nh3.Cleaner, nh3 >= 0.2.18): nh3.clean builds the whole
# allowlist again on every call, half its cost. The filter learns which nonce's markers to
# keep from the render running in this thread.
_CLEANER = nh3.Cleaner(**_OPTIONS) if hasattr(nh3, "Cleaner") else None
_rendering = threading.local()


def _clean(html: str) -> str:
    if _CLEANER is None:
        return nh3.clean(html, **_OPTIONS)
    return _CLEANER.clean(html)


def make_cleaner(nonce: str) -> Callable[[str], str]:
    """A sanitizer for one render; it keeps only markers that carry `nonce`."""
    marker_prefix = nonce + ":"

    def clean(html: str) -> str:
        outer = getattr(_rendering, "marker_prefix", None)
        _rendering.marker_prefix = marker_prefix
        try:
            return _clean(html)
        finally:
            _rendering.marker_prefix = outer

    return clean
