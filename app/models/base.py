"""What every table shares: the declarative base, the clock rows are stamped with, and the
key a [[link]] and a title are matched on."""

from __future__ import annotations

import datetime as dt

from sqlalchemy.orm import DeclarativeBase


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


def link_key(target: str) -> str:
    """What a [[link]] and an entry's title_key match on: white space collapsed, Unicode-lowered
    ([[über]] reaches "Über"). Stored in entry and link rows: changing it needs a migration."""
    return " ".join(target.split()).lower()


class Base(DeclarativeBase):
    pass
