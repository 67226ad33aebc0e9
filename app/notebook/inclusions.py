"""What `![[…]]` brings into a note when it is saved: an attachment found by its file name,
or another note's stored HTML (the render's `resolve_attachment` and `embed_note`).

A note is embedded from its stored `body_html`, never rendered again here, and the render
reduces the embeds inside it to links (render/transclusion.py): an embed is one level deep,
and notes that embed each other cannot recurse.
"""

from __future__ import annotations

from collections.abc import Callable

import sqlalchemy as sa
from sqlalchemy.orm import Session

from app.models import Attachment, Entry
from app.notebook.attachments import safe_filename, url_for_attachment
from app.notebook.render import excerpt


def attachment_finder(session: Session) -> Callable[[str], str | None]:
    """`name` as a note writes it ("Pasted image 2024.png", "assets/x.png") → the URL of
    the newest attachment of that file name (case-insensitive), or None. Attachments keep
    a safe form of their name, so the name written is compared in that form."""
    found: dict[str, str | None] = {}

    def find(name: str) -> str | None:
        key = safe_filename(name).lower()
        if key not in found:
            attachment = session.scalar(
                sa.select(Attachment).where(sa.func.lower(Attachment.filename) == key)
                .order_by(Attachment.created_at.desc(), Attachment.id.desc()).limit(1)
            )
            found[key] = url_for_attachment(attachment) if attachment is not None else None
        return found[key]

    return find


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
