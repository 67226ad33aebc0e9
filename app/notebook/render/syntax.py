"""Commonplace's own markdown syntax, as Python-Markdown processors.

- wiki links (`[[Title]]`, `[[2024-W13]]`, `[[2024-03-31]]` and Obsidian's forms) are in
  wikilinks.py, registered with the rest of Obsidian's syntax (obsidian.py)
- `#tags`
- fenced blocks whose info string names an embed (```` ```run ````)
- `# Heading` needs a space after the hashes, so `#tag` at the start of a line is a tag
- task boxes (`- [ ]`, pymdownx.tasklist) marked so the pipeline can number them
"""

from __future__ import annotations

import html
import logging
import re
import xml.etree.ElementTree as etree
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from markdown import Markdown
from markdown.blockprocessors import HashHeaderProcessor
from markdown.extensions import Extension
from markdown.inlinepatterns import InlineProcessor
from markdown.util import AtomicString
from pymdownx.tasklist import TasklistTreeprocessor

from .sanitize import MARKER_ATTR

log = logging.getLogger(__name__)

_WEEK_RE = re.compile(r"^(\d{4})-[wW](\d{2})$")


def normalise_target(raw: str) -> str:
    """Collapse whitespace; spell ISO weeks with a capital W ("2024-W13")."""
    target = " ".join(raw.split())
    week = _WEEK_RE.match(target)
    return f"{week[1]}-W{week[2]}" if week else target


@dataclass
class RenderState:
    """What one render collects while Python-Markdown walks the document.

    Wiki links and tags are recorded in the order the inline processor meets them,
    which is not document order; the anchors carry `MARKER_ATTR="<nonce>:w:<i>"` so the
    sanitized HTML can be walked afterwards in document order.
    """

    nonce: str
    resolve_link: Callable[[str], tuple]  # -> rendered.Resolved
    tag_url: Callable[[str], str]
    embeds: Mapping[str, Callable[[str], str]]
    resolve_attachment: Callable[[str], str | None] | None = None  # see pipeline.render
    embed_note: Callable[[str, str | None], str | None] | None = None
    # template.py's: an embedded note left open, `(page, fragment, link) -> show`, where
    # `show(alone)` is what stands for it (alone: the embed was a paragraph of its own)
    defer_note: Callable[[str, str | None, str], Callable[[bool], str]] | None = None
    clean: Callable[[str], str] | None = None  # this render's sanitizer
    links: list[tuple[str, str]] = field(default_factory=list)  # (target, text)
    tags: list[str] = field(default_factory=list)  # as written
    embed_html: list[str | Callable[[bool], str]] = field(default_factory=list)
    _resolved: dict[str, tuple[str, bool]] = field(default_factory=dict)
    _tag_hrefs: dict[str, str] = field(default_factory=dict)

    def marker(self, kind: str, index: int) -> str:
        return f"{self.nonce}:{kind}:{index}"

    def embed_token(self, index: int) -> str:
        # Letters and digits only, so markdown and the sanitizer leave it alone; the
        # nonce is secret and fresh per render, so user text cannot forge one.
        return f"CPEMBED{self.nonce}I{index}E"

    def resolve(self, target: str) -> tuple:
        if target not in self._resolved:
            self._resolved[target] = self.resolve_link(target)
        return self._resolved[target]

    def tag_href(self, tag: str) -> str:
        """tag_url(tag), asked once per tag a render (a note repeats its tags)."""
        href = self._tag_hrefs.get(tag)
        if href is None:
            href = self._tag_hrefs[tag] = self.tag_url(tag)
        return href


class _ReadsState:
    """A processor of a Markdown instance that is reused render after render (one per
    thread): it reads the current render's state through the extension, never keeps it."""

    ext: CommonplaceExtension

    @property
    def state(self) -> RenderState:
        return self.ext.state


# A tag starts with a letter and follows the start of the text, whitespace or "(",
# so URL fragments (http://x/#frag), entities (&#39;) and "C#" are not tags.
TAG_RE = r"(?<![^\s(])#([^\W\d_][\w/-]*)"


class TagProcessor(_ReadsState, InlineProcessor):
    ANCESTOR_EXCLUDES = ("a",)

    def __init__(self, ext: CommonplaceExtension, md: Markdown):
        super().__init__(TAG_RE, md)
        self.ext = ext

    def handleMatch(self, m: re.Match[str], data: str):  # type: ignore[override]
        state = self.state
        tag = m.group(1).rstrip("/-_")
        el = etree.Element("a")
        el.set("class", "tag")
        el.set("href", state.tag_href(tag.lower()))
        el.set(MARKER_ATTR, state.marker("t", len(state.tags)))
        el.text = AtomicString("#" + tag)
        state.tags.append(tag)
        return el, m.start(0), m.start(1) + len(tag)


def call_embed(embeds: Mapping[str, Callable[[str], str]], name: str, source: str) -> str:
    """An embed's HTML, or a note of why it failed: an embed must not take the page down."""
    try:
        return str(embeds[name](source))
    except Exception as exc:
        log.warning("embed %r failed", name, exc_info=True)
        message = f"{name}: {type(exc).__name__}: {exc}"
        return f'<div class="embed-error">Embed failed — {html.escape(message)}</div>'


class SpacedHashHeaderProcessor(HashHeaderProcessor):
    # Python-Markdown takes "#tag" at the start of a line for a heading; require the
    # space (as CommonMark does) so that line-leading #tags stay tags.
    RE = re.compile(
        r"(?:^|\n)(?P<level>#{1,6})(?=[ \t]|\n|$)"
        r"(?P<header>(?:\\.|[^\\#]|#+(?=[^#\n]))*?)#*(?:\n|$)"
    )


class NumberedTasklist(_ReadsState, TasklistTreeprocessor):
    """pymdownx.tasklist's boxes, each marked `MARKER_ATTR="<nonce>:x:<i>"`. The pipeline
    turns the marks into `data-task="<n>"` (document order) after sanitizing, so the page
    can tick box n; user HTML cannot carry a mark, so it cannot pose as a task box."""

    def __init__(self, ext: CommonplaceExtension, md: Markdown, config: dict):
        super().__init__(md)
        self.ext = ext
        self.config = config

    def run(self, root):
        stash = self.md.htmlStash
        first = stash.html_counter
        super().run(root)
        # Everything tasklist stashed during its run is a box, one per task item.
        for i in range(first, stash.html_counter):
            mark = f'<input {MARKER_ATTR}="{self.state.marker("x", i - first)}" '
            stash.rawHtmlBlocks[i] = str(stash.rawHtmlBlocks[i]).replace("<input ", mark, 1)
        return root


class CommonplaceExtension(Extension):
    """Tags, fenced embeds (`embed`) and numbered task boxes. `state` is the current render's:
    the pipeline sets it before each convert, so one Markdown instance serves many."""

    def __init__(self, state: RenderState):
        super().__init__()
        self.state = state

    def embed(self, name: str, source: str) -> str | None:
        """The placeholder for a fenced block whose info string names one of this render's
        embeds (lists.py finds the blocks), or None: the block is code. The embed's HTML is
        trusted and may hold inline SVG, which the sanitizer would strip, so it is kept
        aside and put in the placeholder's place after sanitizing."""
        state = self.state
        if name not in state.embeds:
            return None
        token = state.embed_token(len(state.embed_html))
        state.embed_html.append(call_embed(state.embeds, name, source))
        return token

    def extendMarkdown(self, md: Markdown) -> None:
        md.parser.blockprocessors.register(SpacedHashHeaderProcessor(md.parser), "hashheader", 70)
        # after links, autolinks and raw inline HTML (90): a "#" inside a URL or an
        # attribute has been consumed by then
        md.inlinePatterns.register(TagProcessor(self, md), "cp_tag", 85)
        if "task-list" in md.treeprocessors:  # same place, same options, marked boxes
            config = md.treeprocessors["task-list"].config
            md.treeprocessors.register(NumberedTasklist(self, md, config), "task-list", 25)
