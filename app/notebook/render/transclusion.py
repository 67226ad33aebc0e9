"""A note inside another (`![[Note]]`, `![[Note#Heading]]`, `![[Note#^block]]`): the part
of a stored note an embed shows, and the frame it is shown in.

Works on sanitized HTML (the sanitizer's serialisation: "<" in text is always escaped, so
every "<name" is a tag) and never recurses: an embed inside embedded HTML becomes a plain
link to its note, so an embed is one level deep whatever the notes say, and a note that
embeds itself (or a cycle of notes) shows one copy with a link.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from .anchors import fragment_anchor
from .plaintext import _TAG_RE as TAG_RE

_ID_ATTR_RE = re.compile(r'\sid="[^"]*"')
_PERMALINK_RE = re.compile(r'<a\b[^>]*\bclass="headerlink"[^>]*>[^<]*</a>')
_FRAME_CLASS = 'class="note-embed"'
_SOURCE_RE = re.compile(r'<p class="note-embed-source">.*?</p>', re.S)
_HEADINGS = {f"h{n}" for n in range(1, 7)}


def _end_of(html: str, start: re.Match[str]) -> int:
    """Where the element whose start tag is `start` ends (after its end tag)."""
    name, depth = start[2].lower(), 1
    for m in TAG_RE.finditer(html, start.end()):
        if m[2].lower() != name:
            continue
        depth += -1 if m[1] else 1
        if depth == 0:
            return m.end()
    return len(html)


def excerpt(html: str, fragment: str | None) -> str | None:
    """The part of a note's HTML that `fragment` names: a heading with everything up to
    the next heading of its level or above, or a block (`^id`); all of it without one.
    None: the note has no such heading or block."""
    if not fragment:
        return html
    anchor = fragment_anchor(fragment)
    if anchor is None:
        return None
    wanted = f'id="{anchor}"'
    for m in TAG_RE.finditer(html):
        if m[1] or wanted not in m[3]:
            continue
        name = m[2].lower()
        if name not in _HEADINGS:
            return html[m.start() : _end_of(html, m)]
        level = int(name[1])
        for later in TAG_RE.finditer(html, m.end()):
            other = later[2].lower()
            if not later[1] and other in _HEADINGS and int(other[1]) <= level:
                return html[m.start() : later.start()]
        return html[m.start() :]
    return None


def flatten(html: str, keep: Callable[[str], bool] | None = None) -> str:
    """Embedded HTML with each embed in it reduced to the link to its note; or, given
    `keep`, those whose source line (its HTML) it does not keep."""
    if _FRAME_CLASS not in html:
        return html
    out, at = [], 0
    for m in TAG_RE.finditer(html):
        if m.start() < at or m[1] or m[2].lower() != "div" or _FRAME_CLASS not in m[3]:
            continue
        end = _end_of(html, m)
        source = _SOURCE_RE.search(html, m.end(), end)
        if keep is not None and source and keep(source[0]):
            continue
        out.append(html[at : m.start()])
        out.append(source[0] if source else "")
        at = end
    out.append(html[at:])
    return "".join(out)


def frame(link: str, body: str) -> str:
    """`body` (another note's HTML) framed, under a link to it. Its ids and permalinks go:
    they would clash with the page's own and point at headings that are not there."""
    inner = _PERMALINK_RE.sub("", flatten(body))
    inner = TAG_RE.sub(lambda m: m[0] if m[1] or " id=" not in m[3]
                       else f"<{m[2]}{_ID_ATTR_RE.sub('', m[3])}>", inner)
    return f'<div {_FRAME_CLASS}><p class="note-embed-source">{link}</p>{inner}</div>'
