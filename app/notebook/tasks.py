"""Task boxes: tick or untick the n-th `- [ ]` of a note from its rendered page.

The page numbers its boxes from the render (`data-task="n"`, app/notebook/render); the
text numbers them by scanning the markdown for list items that start with a box, outside
fenced code. The two must agree before anything changes: the edit is checked by rendering
it, so a note whose boxes the scan cannot place (raw HTML, indented code, …) is refused
with a clear message instead of ticking the wrong line.
"""

from __future__ import annotations

import re

from app.errors import Invalid
from app.notebook import render, saving

# A list item (in any depth of blockquote) whose text starts with a box and goes on:
# what pymdownx.tasklist turns into a checkbox.
BOX_RE = re.compile(
    r"^(?:[ \t]*>)*[ \t]*(?:[-*+]|\d{1,9}[.)])[ \t]+\[(?P<state>[ xX])\][ \t]+\S", re.M)


def boxes(body: str) -> list[tuple[int, bool]]:
    """(offset of the state character, ticked) for every task box in the text, in order.
    Fenced blocks are skipped with the same grammar the renderer uses for them."""
    fenced = render.fenced_blocks(body)
    found = []
    for m in BOX_RE.finditer(body):
        if any(fence.start <= m.start() < fence.end for fence in fenced):
            continue
        found.append((m.start("state"), m["state"] != " "))
    return found


def set_box(body: str, index: int, done: bool) -> str:
    """The text with box `index` ticked (`[x]`) or not (`[ ]`); the same text if it already
    is. Raises Invalid if there is no such box. Pure: no rendering, no database."""
    found = boxes(body)
    if not 0 <= index < len(found):
        raise Invalid(f"there is no task box {index} in this text "
                      f"({len(found)} found)", "task")
    offset, ticked = found[index]
    if ticked == done:
        return body
    return body[:offset] + ("x" if done else " ") + body[offset + 1:]


def tick(body: str, index: int, done: bool) -> str:
    """`set_box`, checked against the renderer (under the save's budget): box `index` of
    the page is the one that changed, and nothing else did."""
    shown = saving.render(body, "body").tasks
    if not 0 <= index < len(shown):
        raise Invalid(f"there is no task box {index} on this page ({len(shown)} shown)",
                      "task")
    if [ticked for _, ticked in boxes(body)] != shown:
        raise _unmatched()
    changed = set_box(body, index, done)
    if changed != body and saving.render(changed, "body").tasks != [
            *shown[:index], done, *shown[index + 1:]]:
        raise _unmatched()
    return changed


def _unmatched() -> Invalid:
    return Invalid("this note's task boxes could not be matched to its text (raw HTML or "
                   "indented code near them?); tick this one in the editor", "task")
