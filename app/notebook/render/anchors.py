"""Where a link into a note lands: heading ids, block ids, and the parts of a link target.

One owner for the ids, so that a `[[Note#Heading]]` link, the table of contents, and the
section an embed cuts out of a stored note all agree.
"""

from __future__ import annotations

import re

from markdown.extensions.toc import slugify_unicode

# Obsidian's block ids: letters, digits and dashes (`^my-block`).
BLOCK_ID_RE = re.compile(r"^[A-Za-z0-9-]{1,64}$")

# toc.slugify_unicode's two patterns for the "-" separator, compiled once (it looks them up
# by string on every heading)
_NOT_SLUG_RE = re.compile(r"[^\w\s-]")
_SEPARATORS_RE = re.compile(r"[-\s]+")


def heading_slug(value: str, separator: str = "-") -> str:
    """A heading's id: the toc's slugify (it is the toc extension's `slugify`;
    `slugify_unicode`, the same for "-"). "h-" keeps heading ids out of the page template's
    id namespace (see sanitize)."""
    if separator != "-":
        return "h-" + (slugify_unicode(value, separator) or "section")
    slug = _SEPARATORS_RE.sub("-", _NOT_SLUG_RE.sub("", value).strip().lower())
    return "h-" + (slug or "section")


def block_anchor(block_id: str) -> str:
    """The id a block ending in ` ^block_id` gets ("b-", like "h-", a namespace of ours)."""
    return "b-" + block_id


def split_target(raw: str) -> tuple[str, str | None]:
    """`Folder/Note#Heading#Sub` -> ("Folder/Note", "Heading#Sub"); no "#": no fragment.
    The page part keeps its spelling; `normalise_target` tidies it."""
    page, hash_, fragment = raw.partition("#")
    fragment = fragment.strip()
    return page, (fragment if hash_ and fragment else None)


def fragment_anchor(fragment: str) -> str | None:
    """The id a fragment names: `^block` a block, otherwise a heading (the last of a
    `Heading#Sub` path, as Obsidian takes it). None for a block id Obsidian would refuse."""
    if fragment.startswith("^"):
        block = fragment[1:].strip()
        return block_anchor(block) if BLOCK_ID_RE.match(block) else None
    last = [part for part in fragment.split("#") if part.strip()]
    return heading_slug(last[-1].strip()) if last else None


def fragment_label(fragment: str) -> str:
    """How a fragment reads in a link's text: "Heading > Sub", "^block"."""
    return " > ".join(part.strip() for part in fragment.split("#") if part.strip())
