"""Wiki links and embeds, as Obsidian writes them.

- `[[Note]]`, `[[Folder/Note]]`, `[[Note|shown text]]`, `[[Note.md]]`
- `[[Note#Heading]]`, `[[Note#Heading#Sub]]`, `[[Note#^block]]`, `[[#Heading]]` (this note)
- `[[paper.pdf]]`: a link to an attachment, when one has that name
- `![[image.png]]`, `![[image.png|100]]`, `![[image.png|100x80]]`: an attachment's image
- `![[Note]]`, `![[Note#Heading]]`, `![[Note#^block]]`: the note (or part) itself, framed

`resolve_link` is always asked about the page part only ("Note", "Folder/Note"), and the
page part is what a render records as the link's target, so backlinks hold whatever
follows the "#".
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as etree

from markdown import Markdown, util
from markdown.inlinepatterns import InlineProcessor
from markdown.util import AtomicString

from .anchors import fragment_anchor, fragment_label, split_target
from .sanitize import MARKER_ATTR
from .syntax import CommonplaceExtension, RenderState, normalise_target
from .transclusion import frame

WIKILINK_RE = r"\[\[([^\[\]|\n]+)(?:\|([^\[\]\n]*))?\]\]"
EMBED_RE = r"!" + WIKILINK_RE

IMAGE_EXTENSIONS = {"png", "jpg", "jpeg", "gif", "webp", "svg", "bmp", "avif"}
# A name with one of these is a file, not a note (Obsidian's "other files" it opens).
FILE_EXTENSIONS = IMAGE_EXTENSIONS | {
    "pdf", "mp3", "wav", "m4a", "ogg", "flac", "webm", "mp4", "mov", "mkv", "ogv",
    "txt", "csv", "json", "zip",
}  # fmt: skip
_SIZE_RE = re.compile(r"^(\d{1,5})(?:x(\d{1,5}))?$")
_STASHED_RE = re.compile(re.escape(util.INLINE_PLACEHOLDER_PREFIX) + r"(\d+)" + util.ETX)
_ESCAPED_RE = re.compile(util.STX + r"(\d+)" + util.ETX)  # what the escape pattern leaves


def _extension(name: str) -> str:
    base = name.rsplit("/", 1)[-1]
    return base.rsplit(".", 1)[-1].lower() if "." in base else ""


def _page(raw: str) -> str:
    """The page part as resolve_link takes it: tidied, without a ".md" on the end."""
    page = normalise_target(raw)
    return page[:-3].rstrip() if page.lower().endswith(".md") else page


def _label(page: str, fragment: str | None) -> str:
    if not fragment:
        return page
    return f"{page} > {fragment_label(fragment)}" if page else fragment_label(fragment)


class _Links:
    """What both processors share: reading the render's state, making a wiki link."""

    ext: CommonplaceExtension
    md: Markdown

    def parts(self, m: re.Match[str]) -> tuple[str, str]:
        """(target, alias) as written. Backslash escapes ran before this pattern, so in a
        table's `[[Note\\|alias]]` (Obsidian's way to keep the "|" from splitting the cell)
        the "|" reaches here stashed: put escaped characters back, then split."""
        target, alias = m.group(1), m.group(2)
        if util.STX not in target:
            return target, alias or ""
        stash = self.md.treeprocessors["inline"].stashed_nodes  # type: ignore[attr-defined]

        def unescape(p: re.Match[str]) -> str:
            node = stash.get(p[1])
            escaped = _ESCAPED_RE.fullmatch(node) if isinstance(node, str) else None
            return chr(int(escaped[1])) if escaped else p[0]

        target = _STASHED_RE.sub(unescape, target)
        if alias is None:
            target, _, alias = target.partition("|")
        return target, alias or ""

    @property
    def state(self) -> RenderState:
        return self.ext.state

    def page_link(self, page: str, fragment: str | None, text: str) -> etree.Element:
        """An anchor to `page` (recorded as a link of this note), at `fragment` if any."""
        url, exists, *draft = self.state.resolve(page)
        anchor = fragment_anchor(fragment) if fragment else None
        el = etree.Element("a")
        el.set("class", "wikilink draft" if draft and draft[0] else
               "wikilink" if exists else "wikilink missing")
        el.set("href", url + ("#" + anchor if anchor else ""))
        el.set(MARKER_ATTR, self.state.marker("w", len(self.state.links)))
        # Atomic: the alias is plain text, not markdown (no tags or links inside).
        el.text = AtomicString(text)
        self.state.links.append((page, text))
        return el

    def local_link(self, fragment: str, text: str) -> etree.Element | None:
        anchor = fragment_anchor(fragment)
        if anchor is None:
            return None
        el = etree.Element("a")
        el.set("class", "wikilink")
        el.set("href", "#" + anchor)
        el.text = AtomicString(text)
        return el

    def attachment_url(self, name: str) -> str | None:
        resolve = self.state.resolve_attachment
        return resolve(name) if resolve is not None else None


class WikiLinkProcessor(_Links, InlineProcessor):
    ANCESTOR_EXCLUDES = ("a",)  # never an anchor inside a markdown link

    def __init__(self, ext: CommonplaceExtension, md: Markdown):
        super().__init__(WIKILINK_RE, md)
        self.ext = ext

    def handleMatch(self, m: re.Match[str], data: str):  # type: ignore[override]
        target, alias = self.parts(m)
        page_raw, fragment = split_target(target)
        alias = " ".join(alias.split())
        page = _page(page_raw)
        if not page:
            el = self.local_link(fragment, alias or _label("", fragment)) if fragment else None
            return (el, m.start(0), m.end(0)) if el is not None else (None, None, None)
        if _extension(page) in FILE_EXTENSIONS:
            url = self.attachment_url(page)
            if url is not None:  # a file of this notebook: a plain link to it
                el = etree.Element("a")
                el.set("href", url)
                el.text = AtomicString(alias or page)
                return el, m.start(0), m.end(0)
        text = alias or _label(page, fragment)
        return self.page_link(page, fragment, text), m.start(0), m.end(0)


class EmbedProcessor(_Links, InlineProcessor):
    """`![[…]]`: an attachment's image (or a link to the file), or another note's HTML.

    A note's HTML comes from `embed_note` and goes in, framed and sanitized, only after
    the page is sanitized (an embed placeholder, as fenced embeds do), so it is neither
    parsed as this note's markdown nor counted in this note's text."""

    ANCESTOR_EXCLUDES = ("a",)

    def __init__(self, ext: CommonplaceExtension, md: Markdown):
        super().__init__(EMBED_RE, md)
        self.ext = ext

    def handleMatch(self, m: re.Match[str], data: str):  # type: ignore[override]
        target, alias = self.parts(m)
        page_raw, fragment = split_target(target)
        alias = " ".join(alias.split())
        name = " ".join(page_raw.split())
        if _extension(name) in FILE_EXTENSIONS:
            return self._file(name, alias), m.start(0), m.end(0)
        page = _page(page_raw)
        if not page:  # `![[#Heading]]`: this note's own heading; a link to it
            el = self.local_link(fragment, _label("", fragment)) if fragment else None
            return (el, m.start(0), m.end(0)) if el is not None else (None, None, None)
        return self._note(page, fragment, alias), m.start(0), m.end(0)

    def _file(self, name: str, alias: str) -> etree.Element:
        url = self.attachment_url(name)
        if url is None:  # the file is not in the notebook: say so where it would be
            el = etree.Element("span")
            el.set("class", "missing-embed")
            el.text = AtomicString(name)
            return el
        if _extension(name) not in IMAGE_EXTENSIONS:
            el = etree.Element("a")
            el.set("href", url)
            el.text = AtomicString(alias or name)
            return el
        el = etree.Element("img")
        el.set("src", url)
        *alt, last = alias.split("|") if alias else [""]
        size = _SIZE_RE.match(last.strip())
        if size:
            el.set("width", size[1])
            if size[2]:
                el.set("height", size[2])
        else:
            alt.append(last)
        el.set("alt", " ".join("|".join(alt).split()) or name)
        return el

    def _note(self, page: str, fragment: str | None, alias: str) -> etree.Element | str:
        text = alias or _label(page, fragment)
        if self.state.defer_note is not None:  # what to show is decided when it is filled
            link = self.page_link(page, fragment, text)
            del link.attrib[MARKER_ATTR]
            token = self.state.embed_token(len(self.state.embed_html))
            self.state.embed_html.append(self.state.defer_note(
                page, fragment, etree.tostring(link, encoding="unicode")))
            return AtomicString(token)
        embed_note = self.state.embed_note
        body = embed_note(page, fragment) if embed_note is not None else None
        link = self.page_link(page, fragment, text)
        if body is None or self.state.clean is None:
            return link  # nothing to show (or not to be shown): the link alone
        del link.attrib[MARKER_ATTR]  # the frame is added after the page's marks are read
        source = etree.tostring(link, encoding="unicode")
        token = self.state.embed_token(len(self.state.embed_html))
        self.state.embed_html.append(self.state.clean(frame(source, body)))
        return AtomicString(token)
