"""Fenced blocks that embed something other than code, by info string.

The markdown pipeline calls EMBEDS[name](session, block_text) for a block such as

    ```run
    id: 42
    ```

and inserts the returned HTML after sanitizing the rest of the entry, so an embed is
trusted server-side code that must escape whatever it prints.

The notebook knows no embed of its own: the layers above register theirs when the app is
built (create_app registers the journal's run card), so the notebook never imports them.

In files on disk (the notes mirror, an export) the block stays, and after it comes what
it shows, as markdown, between two marks (`in_files`): what `register_markdown` registered
for it, with the files it draws (charts, under FILES_DIR), indented as the block is (in a
list item, the item's text). Blocks are found as the renderer finds them
(render.fenced_blocks). Reading such a file back (`without_shown`) drops what is between
the marks: the page renders the block live.

What is shown links only to files beside it, never to the app's pages (a dead link in a
vault opened without the app): an embed whose block gives a place a name (`register_anchor`:
a run's card is `run-42`) writes it as an Obsidian block id, and `in_files` hands the
markdown a `link(anchor)` that gives the relative link to the file of the folder holding
that anchor (`linker`), or None: nothing there, plain text (a mirror's file knows only
its own anchors).
"""

import logging
import posixpath
import re
from collections.abc import Callable
from urllib.parse import quote

from sqlalchemy.orm import Session

from app.notebook import render

log = logging.getLogger(__name__)
Embed = Callable[[Session, str], str]
EMBEDS: dict[str, Embed] = {}
# (session, block text, link=Link) -> (markdown, {file name: text}); ("", {}): nothing
Markdown = Callable[..., tuple[str, dict[str, str]]]
MARKDOWN: dict[str, Markdown] = {}
Link = Callable[[str], str | None]  # an anchor -> a relative link to it, or None
# block text -> the anchor its shown markdown carries (None: none)
ANCHORS: dict[str, Callable[[str], str | None]] = {}
FILES_DIR = "run-cards"  # beside the notes, at the top of the folder
_SHOWN_RE = re.compile(
    r"\n[ ]*<!-- commonplace:(\w+) shown -->\n.*?\n[ ]*<!-- commonplace:\1 end -->", re.S)


def register(name: str, embed: Embed) -> None:
    EMBEDS[name] = embed


def register_markdown(name: str, markdown: Markdown) -> None:
    """`markdown(session, block_text, link=...)` -> (markdown, {file name: text})."""
    MARKDOWN[name] = markdown


def register_anchor(name: str, anchor: Callable[[str], str | None]) -> None:
    ANCHORS[name] = anchor


def _no_link(anchor: str) -> None:
    return None


def anchors(body: str) -> list[str]:
    """The anchors the blocks of `body` show, in order (an export's map of where each is)."""
    if not ANCHORS or ("```" not in body and "~~~" not in body):
        return []
    return [found for block in render.fenced_blocks(body)
            if block.closed and block.lang in ANCHORS
            and (found := ANCHORS[block.lang](block.code + "\n"))]


def linker(anchored: dict[str, str], path: str) -> Link:
    """Links from the file at `path` (under the folder) to the anchors `anchored` places
    ({anchor: path}), relative and encoded as Obsidian's markdown links are
    (`../2024-W13.md#^run-42`)."""
    here = posixpath.dirname(path) or "."

    def link(anchor: str) -> str | None:
        there = anchored.get(anchor)
        if there is None:
            return None
        return f"{quote(posixpath.relpath(there, here))}#^{anchor}"
    return link


def in_files(session: Session, body: str, up: int = 0, link: Link = _no_link
             ) -> tuple[str, dict[str, str]]:
    """`body` as a file on disk holds it, and the files it needs ({path under the folder:
    text}); `up` is how many folders deep the file lies (its charts' links climb that);
    `link`, where the anchors of the folder are (module docstring)."""
    if not MARKDOWN or ("```" not in body and "~~~" not in body):
        return body, {}
    files: dict[str, str] = {}
    out: list[str] = []
    done = 0
    for block in render.fenced_blocks(body):
        # a block never closed runs to the end of its item: nothing can follow it there
        shown = _shown(session, block.lang, block.code, up, files, link) \
            if block.closed and block.lang in MARKDOWN else None
        if shown is None:
            continue
        indent = " " * block.column
        shown = "\n".join(indent + line if line else line for line in shown.split("\n"))
        out.append(body[done:block.end])
        out.append(shown + "\n" if body[block.end - 1] == "\n" else "\n" + shown)
        done = block.end
    return "".join(out) + body[done:], files


def _shown(session: Session, name: str, code: str, up: int, files: dict[str, str],
           link: Link) -> str | None:
    """What an embed's block shows, as markdown between its marks (its files added to
    `files`), or None: nothing to show."""
    try:
        text, drawn = MARKDOWN[name](session, code + "\n", link=link)
    except Exception:  # a file without the numbers still holds the block
        log.exception("the %s block could not be written as markdown", name)
        return None
    if not text:
        return None
    text = text.replace("<!--", "< !--")  # so that nothing in it can end it
    for file_name in drawn:
        text += f"\n\n![{file_name}]({'../' * up}{FILES_DIR}/{file_name})"
    files.update({posixpath.join(FILES_DIR, n): t for n, t in drawn.items()})
    return f"<!-- commonplace:{name} shown -->\n{text}\n<!-- commonplace:{name} end -->"


def without_shown(text: str) -> str:
    """A file's text less what `in_files` added (its blocks stay)."""
    return _SHOWN_RE.sub("", text) if "<!-- commonplace:" in text else text
