"""What each field of an entry may hold, checked and put in its stored form
(entries.py, which saves, and everything that asks it about a field: the API's schema, the
edit form, the import)."""

from __future__ import annotations

import datetime as dt
import re
import unicodedata

from app.errors import Invalid

MAX_TITLE = 200
MAX_BODY = 1_000_000
MAX_TAGS = 30
TAG_RE = re.compile(r"^[a-z][a-z0-9_/-]{0,49}$")
DATE_RE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
# Whitespace is folded to spaces first; what is left of these has no place in a title, and
# NUL or U+FFFF in one would make the Atom feed that carries it unreadable XML.
TITLE_UNWANTED = re.compile("[\x00-\x1f\x7f-\x9f\ufffe\uffff]")
STATUSES = ("draft", "published")


def parse_date(value) -> dt.date:
    if isinstance(value, dt.date):
        return value
    if not isinstance(value, str) or not DATE_RE.match(value):
        raise Invalid("date must be YYYY-MM-DD", "date")
    try:
        day = dt.date.fromisoformat(value)
    except ValueError:
        raise Invalid(f"{value} is not a calendar date", "date") from None
    if not 1900 <= day.year <= 2999:
        raise Invalid("date must be between 1900 and 2999", "date")
    return day


def parse_tags(value) -> list[str]:
    """Tags as a list or a space/comma separated string; '#' prefixes are dropped."""
    if value is None:
        return []
    if isinstance(value, str):
        value = re.split(r"[\s,]+", value)
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise Invalid("tags must be a list of strings", "tags")
    tags: list[str] = []
    for raw in value:
        tag = raw.strip().lstrip("#").lower()
        if not tag:
            continue
        if not TAG_RE.match(tag):
            raise Invalid(
                f"tag {raw!r}: letters, digits, '-', '_' and '/', starting with a letter", "tags"
            )
        if tag not in tags:
            tags.append(tag)
    if len(tags) > MAX_TAGS:
        raise Invalid(f"at most {MAX_TAGS} tags", "tags")
    return tags


def check_title(value) -> str:
    if not isinstance(value, str) or not value.strip():
        raise Invalid("title is required", "title")
    title = " ".join(value.split())
    if len(title) > MAX_TITLE:
        raise Invalid(f"title is longer than {MAX_TITLE} characters", "title")
    if unwanted := TITLE_UNWANTED.search(title):
        raise Invalid(f"title holds U+{ord(unwanted[0]):04X}, which is not text", "title")
    return title


def check_body(value) -> str:
    if not isinstance(value, str):
        raise Invalid("body must be a string", "body")
    if len(value) > MAX_BODY:
        raise Invalid(f"body is longer than {MAX_BODY} characters", "body")
    # Trailing blank lines are an editor's accident, not content; dropping them keeps the
    # mirror file and an import of it byte-for-byte the same entry.
    return value.replace("\r\n", "\n").rstrip()


def check_status(value) -> str:
    if value not in STATUSES:
        raise Invalid("status must be 'draft' or 'published'", "status")
    return value


def check_publish(value) -> bool:
    if not isinstance(value, bool):
        raise Invalid("publish must be true or false", "publish")
    return value


def slugify(title: str) -> str:
    text = unicodedata.normalize("NFKD", title).encode("ascii", "ignore").decode()
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:80].strip("-")
    return slug or "entry"
