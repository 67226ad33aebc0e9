"""render(): markdown in, sanitized HTML plus what the app indexes out."""

from __future__ import annotations

import re
import secrets
import threading
from collections.abc import Callable, Mapping
from typing import Any

import markdown
from markdown.extensions.toc import slugify_unicode

from .block_skip import SkippingBlockLoop
from .highlight import CodeFormatter
from .inline_skip import SkippingInlineProcessor
from .plaintext import extract
from .rendered import Rendered, Resolved, WikiLink, default_resolve_link, default_tag_url
from .sanitize import MARKER_ATTR, make_cleaner
from .syntax import CommonplaceExtension, RenderState

# C0 controls (bar tab/newline/CR) have no place in a note, and STX/ETX would let the
# text impersonate Python-Markdown's own stash placeholders.
_CONTROL_RE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def _heading_slug(value: str, separator: str) -> str:
    # "h-" keeps heading ids out of the page template's id namespace (see sanitize).
    return "h-" + (slugify_unicode(value, separator) or "section")


_EXTENSIONS = [
    "fenced_code", "codehilite", "tables", "footnotes", "toc", "admonition", "sane_lists",
    "pymdownx.tasklist",
]  # fmt: skip


_INLINE_PRIORITY = 20  # Python-Markdown's own place for "inline" (markdown/treeprocessors.py)

_local = threading.local()  # one Markdown per thread: building one is ~15% of a render


def _new_markdown(state: RenderState) -> tuple[markdown.Markdown, CommonplaceExtension]:
    configs: dict[str, dict[str, Any]] = {
        "codehilite": {"css_class": "highlight", "guess_lang": False, "noclasses": False,
                       "pygments_formatter": CodeFormatter},
        "toc": {"permalink": True, "slugify": _heading_slug, "marker": ""},
        "tables": {"use_align_attribute": True},  # not style="text-align: ..."
        "pymdownx.tasklist": {"custom_checkbox": False, "clickable_checkbox": False},
    }
    ext = CommonplaceExtension(state)
    md = markdown.Markdown(extensions=[*_EXTENSIONS, ext], extension_configs=configs,
                           output_format="html")
    # the stock inline processor (same name, same place), less the tries that cannot match
    md.treeprocessors.register(SkippingInlineProcessor(md), "inline", _INLINE_PRIORITY)
    SkippingBlockLoop(md).install()  # and the block loop, less the tests that cannot succeed
    return md, ext


def _convert(source: str, state: RenderState) -> tuple[str, str, list]:
    """Markdown to (body, toc, toc tokens) with this thread's Markdown instance, reset and
    pointed at this render's state. Markdown objects hold per-document state and are not
    safe to share between gunicorn threads - hence one per thread; an embed that renders
    markdown while its note is being converted gets a fresh instance of its own."""
    if getattr(_local, "busy", False):
        md, _ = _new_markdown(state)
        return md.convert(source), md.toc, md.toc_tokens  # type: ignore[attr-defined]
    if not hasattr(_local, "md"):
        _local.md, _local.ext = _new_markdown(state)
    md, _local.ext.state = _local.md, state
    md.reset()
    _local.busy = True
    try:
        body = md.convert(source)
        return body, md.toc, md.toc_tokens  # type: ignore[attr-defined]
    finally:
        _local.busy = False


def _count_headings(tokens: list[dict[str, Any]]) -> int:
    return sum(1 + _count_headings(t["children"]) for t in tokens)


def render(
    body_md: str,
    *,
    resolve_link: Callable[[str], Resolved] = default_resolve_link,
    tag_url: Callable[[str], str] = default_tag_url,
    embeds: Mapping[str, Callable[[str], str]] | None = None,
    resolve_attachment: Callable[[str], str | None] | None = None,
) -> Rendered:
    """Render a note's markdown to sanitized HTML, collecting links, tags and text.

    `resolve_link(target) -> Resolved(url, exists, draft)` places wiki links; `tag_url(tag)` places
    tags; `embeds[name](source)` renders a ```` ```name ```` block to trusted HTML;
    `resolve_attachment(name)` is an attached file's URL or None (for ![[name]]).
    """
    source = _CONTROL_RE.sub("", body_md)
    nonce = secrets.token_hex(16)
    while nonce in source:  # practically never; but then no text can spell it
        nonce = secrets.token_hex(16)
    state = RenderState(nonce, resolve_link, tag_url, embeds or {})
    body, toc, toc_tokens = _convert(source, state)
    toc = toc if _count_headings(toc_tokens) >= 2 else ""

    clean = make_cleaner(nonce)
    html, toc_html = clean(body), clean(toc) if toc else ""

    # only a note with an embed holds placeholders (compiled per render: they carry the nonce)
    embed_re = re.compile(rf"CPEMBED{nonce}I(\d+)E") if state.embed_html else None
    found = extract(html, nonce, embed_re)

    links: dict[str, WikiLink] = {}
    seen = found.link_order + list(range(len(state.links)))  # unseen ones last
    for index in seen:
        target, text = state.links[index]
        if target not in links:
            links[target] = WikiLink(target, text, found.link_context.get(index, ""))
    tags = dict.fromkeys(
        state.tags[i].lower() for i in found.tag_order + list(range(len(state.tags)))
    )

    html, tasks = _number_tasks(html)
    html = _LINK_MARK_RE.sub("", html)
    toc_html = _LINK_MARK_RE.sub("", toc_html)
    if embed_re:
        # Trusted HTML goes in only now, after sanitizing.
        def embed(m: re.Match[str]) -> str:
            return state.embed_html[int(m.group(1))]

        html = re.sub(rf"<p>{embed_re.pattern}</p>", embed, html)
        html = embed_re.sub(embed, html)
    return Rendered(html, toc_html, list(links.values()), list(tags), found.text, tasks)


# After sanitizing, the only marks left carry this render's nonce (the cleaner drops every
# other), so these patterns need not name it - and compile once, not per render.
_LINK_MARK_RE = re.compile(rf' {MARKER_ATTR}="[0-9a-f]{{32}}:[wt]:\d+"')
_TASK_MARK_RE = re.compile(rf' {MARKER_ATTR}="[0-9a-f]{{32}}:x:\d+"')
_INPUT_RE = re.compile(r"<input\b[^>]*>")
_CHECKED_RE = re.compile(r"\schecked\b")


def _number_tasks(html: str) -> tuple[str, list[bool]]:
    """Task boxes the pipeline marked get `data-task="<n>"` in document order (an attribute
    the sanitizer never lets through from user HTML); returns the HTML and each box's state."""
    states: list[bool] = []

    def number(m: re.Match[str]) -> str:
        tag = m.group(0)
        if not _TASK_MARK_RE.search(tag):
            return tag
        states.append(bool(_CHECKED_RE.search(tag)))
        return _TASK_MARK_RE.sub(f' data-task="{len(states) - 1}"', tag)

    return _INPUT_RE.sub(number, html), states
