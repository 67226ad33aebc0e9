"""What every table shares: the declarative base, the clock rows are stamped with, and the
key a [[link]] and a title are matched on."""

from __future__ import annotations

import datetime as dt
import unicodedata

from sqlalchemy.orm import DeclarativeBase


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


def link_key(target: str) -> str:
    """What a [[link]] and an entry's title_key match on: white space collapsed, Unicode-lowered
    ([[über]] reaches "Über"), composed (NFC: macOS writes "é" in file names as "e" and an
    accent, a link typed there holds one character, and both are the same name to Obsidian).
    Stored in entry and link rows: changing it needs a migration."""
    return unicodedata.normalize("NFC", " ".join(target.split()).lower())


class Base(DeclarativeBase):
    pass
