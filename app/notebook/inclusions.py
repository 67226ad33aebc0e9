"""What `![[Note]]` brings into a note when it is saved: another note's stored HTML (the
render's `embed_note`; its `resolve_attachment`, a file found by its name or its path in
an imported folder, is attachments.resolver).

A note is embedded from its stored `body_html`, never rendered again here, and the render
reduces the embeds inside it to links (render/transclusion.py): an embed is one level deep,
and notes that embed each other cannot recurse.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy.orm import Session

from app.models import Entry
from app.notebook.render import excerpt


def note_embedder(
    session: Session, resolve: Callable[[Session, str], Entry | None]
) -> Callable[[str, str | None], str | None]:
    """`(target, fragment)` → the HTML of that note (or of its heading's section or block)
    as stored, or None: no such note, no such part, or a draft (whose text must not show
    in a published note; its link is marked as a draft link instead)."""

    def embed(target: str, fragment: str | None) -> str | None:
        entry = resolve(session, target)
        if entry is None or entry.status == "draft":
            return None
        return excerpt(entry.body_html or "", fragment)

    return embed
