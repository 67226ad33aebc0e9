"""Full-text search: an SQLite FTS5 index kept in the same transaction as every save, and a
small query language parsed here into a safe FTS5 expression plus filters.

    measure* "bubble fraction" -draft tag:gpu from:2024-01-01 to:2024-03-31 week:2024-W13 kind:week

User words are always quoted before they reach FTS5, so nothing typed can become an FTS5
operator by accident; OR and a leading '-' (exclude) are the operators we offer.
"""

from __future__ import annotations

import datetime as dt
import html
import re
from dataclasses import dataclass, field

import sqlalchemy as sa
from sqlalchemy.orm import Session

from app.models import Entry, EntryTag
from app.weeks import WEEK_RE

# Title and tags matter more than a passing mention in the body.
WEIGHTS = (10.0, 5.0, 1.0)  # title, tags, body
FILTERS = {"tag", "from", "to", "week", "kind"}
TOKEN_RE = re.compile(r'"[^"]*"|\S+')
MARK_OPEN, MARK_CLOSE = "\x02", "\x03"


class QueryError(ValueError):
    """A query we cannot run; the message is shown to the user as it is."""


@dataclass
class Query:
    terms: list[str] = field(default_factory=list)  # FTS5 fragments, already safe
    tags: list[str] = field(default_factory=list)
    date_from: dt.date | None = None
    date_to: dt.date | None = None
    week: str | None = None
    kind: str | None = None

    @property
    def fts(self) -> str:
        return " ".join(self.terms)


def _quote(word: str) -> str:
    return '"' + word.replace('"', '""') + '"'


def _date(name: str, value: str) -> dt.date:
    try:
        return dt.date.fromisoformat(value)
    except ValueError:
        raise QueryError(f"{name}: expects a date like 2024-03-31, not {value!r}") from None


def parse(text: str) -> Query:
    text = (text or "").strip()
    if len(text) > 500:
        raise QueryError("query is longer than 500 characters")
    if text.count('"') % 2:
        raise QueryError('unbalanced quote: close the phrase with another "')
    query = Query()
    pending_or = False
    for token in TOKEN_RE.findall(text):
        name, sep, value = token.partition(":")
        if sep and name.lower() in FILTERS and not token.startswith('"'):
            _apply_filter(query, name.lower(), value)
            continue
        if token == "OR":
            if not query.terms or pending_or:
                raise QueryError("OR needs a word on each side")
            query.terms.append("OR")
            pending_or = True
            continue
        if token in ("AND", "NOT", "NEAR"):
            raise QueryError(f"{token} is not supported: words are all required; "
                             "use -word to exclude one")
        negate = token.startswith("-") and len(token) > 1
        if negate:
            token = token[1:]
        if token.startswith('"'):
            phrase = token[1:-1].strip()
            if not phrase:
                raise QueryError("empty phrase")
            fragment = _quote(phrase)
        else:
            prefix = token.endswith("*")
            word = token.rstrip("*")
            if not re.search(r"\w", word):
                raise QueryError(f"{token!r} has nothing to search for")
            fragment = _quote(word) + ("*" if prefix else "")
        if negate:
            if not query.terms or pending_or:
                raise QueryError("-word excludes from other words; give at least one first")
            query.terms.append("NOT " + fragment)
        else:
            query.terms.append(fragment)
        pending_or = False
    if pending_or:
        raise QueryError("OR needs a word on each side")
    return query


def _apply_filter(query: Query, name: str, value: str) -> None:
    if not value:
        raise QueryError(f"{name}: needs a value")
    if name == "tag":
        query.tags.append(value.lstrip("#").lower())
    elif name == "from":
        query.date_from = _date("from", value)
    elif name == "to":
        query.date_to = _date("to", value)
    elif name == "week":
        if not WEEK_RE.match(value.upper()):
            raise QueryError(f"week: expects an ISO week like 2024-W13, not {value!r}")
        query.week = value.upper()
    elif name == "kind":
        if value not in ("week", "entry"):
            raise QueryError("kind: is 'week' or 'entry'")
        query.kind = value


@dataclass
class Hit:
    entry: Entry
    snippet_html: str
    score: float


@dataclass
class Results:
    query: Query
    hits: list[Hit]
    has_more: bool


def search(session: Session, text: str, *, limit: int = 20, offset: int = 0,
           include_drafts: bool = True) -> Results:
    query = parse(text)
    if not query.terms and not (query.tags or query.date_from or query.date_to
                                or query.week or query.kind):
        return Results(query, [], False)
    conditions = []
    if query.tags:
        for tag in query.tags:
            conditions.append(
                Entry.id.in_(sa.select(EntryTag.entry_id).where(EntryTag.tag == tag))
            )
    if query.date_from:
        conditions.append(Entry.date >= query.date_from)
    if query.date_to:
        conditions.append(Entry.date <= query.date_to)
    if query.week:
        conditions.append(Entry.iso_week == query.week)
    if query.kind:
        conditions.append(Entry.kind == query.kind)
    if not include_drafts:
        conditions.append(Entry.status == "published")

    if query.terms:
        fts = sa.table("entry_fts", sa.column("rowid"), sa.column("entry_fts"))
        rank = sa.func.bm25(sa.literal_column("entry_fts"), *WEIGHTS).label("rank")
        snippet = sa.func.snippet(
            sa.literal_column("entry_fts"), 2, MARK_OPEN, MARK_CLOSE, "…", 16
        ).label("snippet")
        stmt = (
            sa.select(Entry, rank, snippet)
            .join(fts, fts.c.rowid == Entry.id)
            .where(sa.literal_column("entry_fts").op("MATCH")(query.fts), *conditions)
            .order_by(rank, Entry.date.desc())
        )
    else:
        stmt = (
            sa.select(Entry, sa.literal(0.0), sa.literal(""))
            .where(*conditions)
            .order_by(Entry.date.desc(), Entry.id.desc())
        )
    try:
        rows = session.execute(stmt.limit(limit + 1).offset(offset)).all()
    except sa.exc.OperationalError as exc:  # FTS5 syntax we failed to prevent
        session.rollback()
        raise QueryError(f"cannot search for that: {exc.orig}") from None
    hits = [
        Hit(entry, _snippet_html(snip) or html.escape(_lead(entry)), float(score))
        for entry, score, snip in rows[:limit]
    ]
    return Results(query, hits, len(rows) > limit)


def _snippet_html(snippet: str) -> str:
    escaped = html.escape(snippet or "")
    return escaped.replace(MARK_OPEN, "<mark>").replace(MARK_CLOSE, "</mark>")


def _lead(entry: Entry) -> str:
    text = re.sub(r"[#*_`>\[\]]+", "", entry.body_md)
    return " ".join(text.split())[:200]


# -- index maintenance (called by app.entries inside the saving transaction) --------------


def _has_index(session: Session) -> bool:
    return session.get_bind().dialect.name == "sqlite"


def index_entry(session: Session, entry: Entry, text: str) -> None:
    if not _has_index(session):
        return
    session.execute(sa.text("DELETE FROM entry_fts WHERE rowid = :id"), {"id": entry.id})
    session.execute(
        sa.text("INSERT INTO entry_fts (rowid, title, tags, body) VALUES (:id, :t, :g, :b)"),
        {"id": entry.id, "t": entry.title, "g": entry.tags, "b": text},
    )


def remove_entry(session: Session, entry_id: int) -> None:
    if _has_index(session):
        session.execute(sa.text("DELETE FROM entry_fts WHERE rowid = :id"), {"id": entry_id})
