"""render(): markdown in, sanitized HTML plus what the app indexes out."""

from __future__ import annotations

import re
import secrets
import threading
from collections.abc import Callable, Mapping
from typing import Any

import markdown
from markdown.extensions.toc import TocExtension

from . import gfm, links
from .anchors import heading_slug
from .block_skip import SkippingBlockLoop
from .bounded import BoundedHtmlBlocks, NumberedFootnotes, SplitBlocks, flattened
from .fences import NestedFences
from .highlight import CodeFormatter
from .inline_skip import SkippingInlineProcessor
from .lists import ListsAndFences
from .obsidian import ObsidianExtension
from .plaintext import extract
from .rendered import Rendered, Resolved, WikiLink, default_resolve_link, default_tag_url
from .sanitize import MARKER_ATTR, make_cleaner
from .syntax import CommonplaceExtension, RenderState
from .toc import Toc

# C0 controls (bar tab/newline/CR) have no place in a note, and STX/ETX would let the
# text impersonate Python-Markdown's own stash placeholders.
_CONTROL_RE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


_EXTENSIONS = [
    "fenced_code", "codehilite", "tables", "footnotes", "toc", "admonition", "sane_lists",
    "pymdownx.tasklist", "pymdownx.mark",
]  # fmt: skip


_INLINE_PRIORITY = 20  # Python-Markdown's own place for "inline" (markdown/treeprocessors.py)
_HTML_BLOCK_PRIORITY = 20  # and for "html_block" (markdown/preprocessors.py)
_FOOTNOTE_PRIORITY = 175  # and for "footnote" (markdown/extensions/footnotes.py)
_FENCED_PRIORITY = 25  # and for "fenced_code_block" (markdown/extensions/fenced_code.py)
_TOC_PRIORITY = 5  # and for "toc" (markdown/extensions/toc.py)

_local = threading.local()  # one Markdown per thread: building one costs a good part of a render


_TOC_CONFIG = {"permalink": True, "slugify": heading_slug, "marker": ""}


def _new_markdown(state: RenderState) -> tuple[markdown.Markdown, CommonplaceExtension]:
    configs: dict[str, dict[str, Any]] = {
        "codehilite": {"css_class": "highlight", "guess_lang": False, "noclasses": False,
                       "pygments_formatter": CodeFormatter},
        "toc": _TOC_CONFIG,
        "tables": {"use_align_attribute": True},  # not style="text-align: ..."
        "pymdownx.tasklist": {"custom_checkbox": False, "clickable_checkbox": False},
    }
    ext = CommonplaceExtension(state)
    md = markdown.Markdown(extensions=[*_EXTENSIONS, ext, ObsidianExtension(ext)],
                           extension_configs=configs, output_format="html")
    links.install(md)  # the stock link patterns, less their scans to the end
    # the stock toc pass (same place, same options), its per-heading work linear (toc.py)
    md.treeprocessors.register(Toc(md, TocExtension(**_TOC_CONFIG).getConfigs()), "toc",
                               _TOC_PRIORITY)
    gfm.install(md)  # strikethrough and bare URLs
    stock = md.inlinePatterns["footnote"]  # the same, numbered from a table
    md.inlinePatterns.register(NumberedFootnotes(stock.pattern, stock.footnotes), "footnote",
                               _FOOTNOTE_PRIORITY)
    # the stock inline processor (same name, same place), less the tries that cannot match
    md.treeprocessors.register(SkippingInlineProcessor(md), "inline", _INLINE_PRIORITY)
    SkippingBlockLoop(md).install()  # and the block loop, less the tests that cannot succeed
    # the stock raw HTML finder, less its scans for a ">" that is not there; then, with
    # code and HTML stashed, blocks split where the parser would split them anyway
    md.preprocessors.register(BoundedHtmlBlocks(md), "html_block", _HTML_BLOCK_PRIORITY)
    md.preprocessors.register(SplitBlocks(md), "cp_split_blocks", _HTML_BLOCK_PRIORITY - 1)
    # (the "quote" block processor is callouts.py's, a bounded.SplitQuote: ObsidianExtension)
    # just above paragraphs: fences the line pass does not reach (in an admonition)
    md.parser.blockprocessors.register(NestedFences(md.parser), "cp_nested_fences", 12)
    # fenced_code's place: lists nested and fences read as CommonMark does, embed fences
    # made placeholders (lists.py; a quote's text too: bounded.SplitQuote)
    md.preprocessors.register(ListsAndFences(md, ext.embed), "fenced_code_block",
                              _FENCED_PRIORITY)
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
    except BaseException:
        del _local.md  # left half-way (the block parser's state stack), so built anew
        raise
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
    embed_note: Callable[[str, str | None], str | None] | None = None,
    defer_note: Callable[[str, str | None, str], Callable[[bool], str]] | None = None,
) -> Rendered:
    """Render a note's markdown to sanitized HTML, collecting links, tags and text.

    `resolve_link(target) -> Resolved(url, exists, draft)` places wiki links (the page part
    of one: "Note", "Folder/Note"); `tag_url(tag)` places tags; `embeds[name](source)`
    renders a ```` ```name ```` block to trusted HTML. `resolve_attachment(name)` is the
    URL of a file named as written in `![[name]]` / `[[name.pdf]]`, or None (a missing-file
    mark); `embed_note(target, fragment)` is the HTML of a note (or of its heading's section
    or block, `fragment` as written after "#") for `![[target#fragment]]`, or None (then a
    link). Without them, no file is found and no note is embedded. `defer_note` is
    template.py's (RenderState).
    """
    source = _CONTROL_RE.sub("", body_md)
    nonce = secrets.token_hex(16)
    while nonce in source:  # practically never; but then no text can spell it
        nonce = secrets.token_hex(16)
    clean = make_cleaner(nonce)

    def new_state() -> RenderState:
        return RenderState(nonce, resolve_link, tag_url, embeds or {},
                           resolve_attachment=resolve_attachment, embed_note=embed_note,
                           defer_note=defer_note, clean=clean)

    state = new_state()
    try:
        body, toc, toc_tokens = _convert(source, state)
    except RecursionError:  # nested too deep for the parser: its text, without the nesting
        state = new_state()
        body, toc, toc_tokens = _convert(flattened(source), state)
    toc = toc if _count_headings(toc_tokens) >= 2 else ""

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
        def embed(m: re.Match[str], alone: bool = False) -> str:
            shown = state.embed_html[int(m.group(1))]
            return shown if isinstance(shown, str) else shown(alone)

        html = re.sub(rf"<p>{embed_re.pattern}</p>", lambda m: embed(m, True), html)
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
