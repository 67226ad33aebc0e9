"""What the editor offers as you type: `[[` → titles, weeks and dates to link to, and after
`[[Title#` that note's headings; `![[` → attachments by file name, then the same; `#` → tags.

Read-only, bounded queries: titles through the FTS index (never a scan of every entry),
weeks, dates and tags through their indexes. Ranked so that what you are most likely
typing comes first: a title that starts with the text, then one with a word that does,
newer before older.
"""

from __future__ import annotations

import datetime as dt
import html
import re
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.orm import Session, load_only

from app.models import Attachment, Entry, EntryTag
from app.notebook.entries import resolve
from app.notebook.isoweeks import iso_week

MAX_PREFIX = 100
MAX_LIMIT = 20
CANDIDATES = 200  # title matches looked at per request, best bm25 first
_WORD_RE = re.compile(r"[^\W_]+")  # what the index calls a word (unicode61)
_TOP = "\U0010ffff"  # above every character: [prefix, prefix + _TOP) is "starts with"
_SUMMARY = load_only(Entry.id, Entry.kind, Entry.date, Entry.iso_week, Entry.title,
                     Entry.status)


@dataclass(frozen=True)
class Suggestion:
    insert: str  # what goes inside [[…]], or after #
    label: str  # what the list shows
    detail: str  # a date, "letter", "3 entries"
    kind: str  # entry | week | date | tag | heading | file


def links(session: Session, prefix: str, *, today: dt.date, limit: int = 10,
          include_drafts: bool = True) -> list[Suggestion]:
    """Link targets for `[[prefix`: this week and today first when they fit; then, for no
    text, the latest entries; for text that starts with a digit, letters and dates; then
    titles."""
    page, hash_, fragment = prefix.partition("#")
    if hash_:
        return _headings(session, " ".join(page.split()), fragment.strip(), limit,
                         include_drafts)
    text = " ".join(prefix.split())
    found: dict[str, Suggestion] = {}

    def add(items) -> None:
        for item in items:
            found.setdefault(item.insert.lower(), item)

    add(_this_week_and_today(text, today))
    if not text:
        add(_recent(session, limit, include_drafts))
        return list(found.values())[:limit]
    if text[0].isdigit():
        add(_weeks(session, text, limit, include_drafts))
        add(_dates(session, text, limit, include_drafts))
    add(_titles(session, text, limit, include_drafts))
    return list(found.values())[:limit]


def embeds(session: Session, prefix: str, *, today: dt.date, limit: int = 10,
           include_drafts: bool = True) -> list[Suggestion]:
    """For `![[prefix`: attachments whose file name holds the text (newest first), then
    what `[[` offers (a note to embed)."""
    files = _files(session, prefix.strip(), limit, include_drafts)
    notes = links(session, prefix, today=today, limit=limit, include_drafts=include_drafts)
    return (files + notes)[:limit]


def tags(session: Session, prefix: str, *, limit: int = 10,
         include_drafts: bool = True) -> list[Suggestion]:
    """Tags that start with `prefix` (without its '#'), the most used first."""
    text = prefix.strip().lstrip("#").lower()
    uses = sa.func.count().label("uses")
    query = (sa.select(EntryTag.tag, uses)
             .where(EntryTag.tag >= text, EntryTag.tag < text + _TOP)
             .group_by(EntryTag.tag).order_by(uses.desc(), EntryTag.tag).limit(limit))
    if not include_drafts:
        query = query.join(Entry, Entry.id == EntryTag.entry_id).where(
            Entry.status == "published")
    return [Suggestion(tag, "#" + tag, f"{n} entr{'y' if n == 1 else 'ies'}", "tag")
            for tag, n in session.execute(query)]


# -- link targets -------------------------------------------------------------------------


def _entry(entry: Entry) -> Suggestion:
    if entry.kind == "week":
        return Suggestion(entry.iso_week, entry.title, "letter", "week")
    return Suggestion(entry.title, entry.title, entry.date.isoformat(), "entry")


def _visible(query, include_drafts: bool):
    return query if include_drafts else query.where(Entry.status == "published")


def _this_week_and_today(text: str, today: dt.date) -> list[Suggestion]:
    """Offered for what starts their address, or the words they are shown with: `[[tod`
    is today, `[[this` this week."""
    week = iso_week(today)
    offered = [Suggestion(week, week, "this week's letter", "week"),
               Suggestion(today.isoformat(), today.isoformat(), "today", "date")]
    typed = text.lower()
    return [s for s in offered if s.insert.lower().startswith(typed)
            or (typed and s.detail.startswith(typed))]


def _weeks(session: Session, text: str, limit: int, include_drafts: bool) -> list[Suggestion]:
    start = text.upper()
    query = (sa.select(Entry).options(_SUMMARY)
             .where(Entry.kind == "week", Entry.iso_week >= start,
                    Entry.iso_week < start + _TOP)
             .order_by(Entry.iso_week.desc()).limit(limit))
    return [_entry(e) for e in session.scalars(_visible(query, include_drafts))]


def _dates(session: Session, text: str, limit: int, include_drafts: bool) -> list[Suggestion]:
    # Dates are stored as ISO text: compare as text (type_coerce emits no CAST, so the
    # date index still answers the range).
    day = sa.type_coerce(Entry.date, sa.String)
    count = sa.func.count().label("n")
    query = (sa.select(day.label("day"), count)
             .where(Entry.kind == "entry", day >= text, day < text + _TOP)
             .group_by(day).order_by(day.desc()).limit(limit))
    rows = session.execute(_visible(query, include_drafts)).all()
    return [Suggestion(str(d), str(d), f"{n} entr{'y' if n == 1 else 'ies'}", "date")
            for d, n in rows]


def _recent(session: Session, limit: int, include_drafts: bool) -> list[Suggestion]:
    query = (sa.select(Entry).options(_SUMMARY).where(Entry.kind == "entry")
             .order_by(Entry.date.desc(), Entry.id.desc()).limit(limit))
    return [_entry(e) for e in session.scalars(_visible(query, include_drafts))]


def _titles(session: Session, text: str, limit: int, include_drafts: bool) -> list[Suggestion]:
    words = _WORD_RE.findall(text.lower())
    if not words:
        return []
    if session.get_bind().dialect.name == "sqlite":
        # The index stems words (porter), and a stem may be shorter than what is typed
        # ("running" is kept as "run"), so ask for the first three letters of each word
        # and check the real titles below.
        match = "title : (" + " ".join(f'"{w[:3]}"*' for w in words) + ")"
        try:
            ids = list(session.scalars(sa.text(
                "SELECT rowid FROM entry_fts WHERE entry_fts MATCH :q "
                "ORDER BY bm25(entry_fts, 10.0, 0.0, 0.0) LIMIT :n"
            ).bindparams(q=match, n=CANDIDATES)))
        except sa.exc.OperationalError:  # a word the index cannot take: offer no titles
            return []
        where = Entry.id.in_(ids)
    else:  # no index to ask: a bounded look at titles containing the first word
        where = Entry.title_key.contains(words[0], autoescape=True)
    query = sa.select(Entry).options(_SUMMARY).where(where).limit(CANDIDATES)
    ranked = []
    for entry in session.scalars(_visible(query, include_drafts)):
        rank = _rank(entry.title.lower(), text.lower(), words)
        if rank is not None:
            ranked.append((rank, -entry.date.toordinal(), entry.title.lower(), entry))
    ranked.sort(key=lambda row: row[:3])
    return [_entry(row[3]) for row in ranked[:limit]]


# A stored heading: its id, then its text up to the permalink the toc adds.
_HEADING_RE = re.compile(r'<h[1-6] id="h-[^"]*">(.*?)(?:<a class="headerlink"[^>]*>[^<]*</a>)?'
                         r"</h[1-6]>", re.S)
_TAGS_RE = re.compile(r"<[^>]*>")


def _headings(session: Session, page: str, text: str, limit: int,
              include_drafts: bool) -> list[Suggestion]:
    """The headings of the note `page` names (as a link resolves it) that hold `text`,
    those starting with it first, in the note's order."""
    entry = resolve(session, page) if page else None
    if entry is None or (entry.status == "draft" and not include_drafts):
        return []
    want = text.lower()
    found = [html.unescape(_TAGS_RE.sub("", m[1])).strip()
             for m in _HEADING_RE.finditer(entry.body_html or "")]
    hits = [h for h in dict.fromkeys(found) if h and want in h.lower()]
    hits.sort(key=lambda heading: not heading.lower().startswith(want))
    return [Suggestion(f"{page}#{heading}", heading, f"heading in {entry.title}", "heading")
            for heading in hits[:limit]]


def _files(session: Session, text: str, limit: int, include_drafts: bool) -> list[Suggestion]:
    newest = sa.func.max(Attachment.id).label("newest")
    query = (sa.select(Attachment.filename, newest)
             .where(Attachment.filename.contains(text, autoescape=True))
             .group_by(Attachment.filename).order_by(newest.desc()).limit(limit))
    if not include_drafts:
        query = query.join(Entry, Entry.id == Attachment.entry_id).where(
            Entry.status == "published")
    return [Suggestion(name, name, "file", "file") for name, _ in session.execute(query)]


def _rank(title: str, text: str, words: list[str]) -> int | None:
    """0: the title is the text; 1: starts with it; 2: a word starts with it; 3: each typed
    word starts a word of the title; None: not a match."""
    if title == text:
        return 0
    if title.startswith(text):
        return 1
    if re.search(r"(?<!\w)" + re.escape(text), title):
        return 2
    title_words = _WORD_RE.findall(title)
    if all(any(t.startswith(w) for t in title_words) for w in words):
        return 3
    return None
