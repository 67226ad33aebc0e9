"""Full-text search: an SQLite FTS5 index kept in the same transaction as every save, and a
small query language parsed here into a safe FTS5 expression plus filters.

    measure* "bubble fraction" -draft tag:gpu from:2024-01-01 to:2024-03-31 week:2024-W13 kind:week

User words are always quoted before they reach FTS5, so nothing typed can become an FTS5
operator by accident; OR and a leading '-' (exclude) are the operators we offer.

Ranking (app/notebook/ranking.py): up to 400 matches (that the filters allow) come in
bm25's order, weights title 10, tags 5, body 1, ties to the newer entry. Past that, bm25
runs only over a window, so a word in every entry of a 100k notebook costs what a rare one
does: first the matches with a query word in the title or tags (the newest 100, ranked by
how well title and tags match), then the newest 400 matches by bm25 (without a date,
week or kind range, among the newest 10-20k entries only), then older ones, newest first.
Snippets and filters are the same either way.
"""

from __future__ import annotations

import datetime as dt
import html
import re
import unicodedata
from dataclasses import dataclass, field

import sqlalchemy as sa
from sqlalchemy.orm import Session

from app.db import Prepared
from app.errors import BadQuery
from app.models import Entry, EntryTag
from app.notebook import browse, ranking
from app.notebook.entry_rows import LISTED, EntryRow, rows
from app.notebook.isoweeks import parse_week
from app.notebook.ranking import run as _run
from app.notebook.search_budget import check_size, folded_terms, time_limit
from app.notebook.search_index import LETTER_TOKEN, has_index

FILTERS = {"tag", "from", "to", "week", "kind"}
MAX_QUERY = 500
FILTER_NAME_RE = re.compile(r"[a-z]{2,}")
TOKEN_RE = re.compile(r'"[^"]*"|\S+')
MARK_OPEN, MARK_CLOSE = "\x02", "\x03"


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
        raise BadQuery(f"{name}: expects a date like 2024-03-31, not {value!r}") from None


def parse(text: str) -> Query:
    text = (text or "").strip()
    if len(text) > MAX_QUERY:
        raise BadQuery(f"query is longer than {MAX_QUERY} characters")
    if text.count('"') % 2:
        raise BadQuery('unbalanced quote: close the phrase with another "')
    query = Query()
    pending_or = False
    for token in TOKEN_RE.findall(text):
        name, sep, value = token.partition(":")
        if sep and name.lower() in FILTERS and not token.startswith('"'):
            _apply_filter(query, name.lower(), value)
            continue
        if sep and FILTER_NAME_RE.fullmatch(name) and value and not value.startswith("/"):
            raise BadQuery(f"{name}: is not a filter here (they are "
                           f"{', '.join(f'{f}:' for f in sorted(FILTERS))}); to search for "
                           f'the text, put it in quotes: "{token}"')
        if token == "OR":
            if not query.terms or pending_or:
                raise BadQuery("OR needs a word on each side")
            query.terms.append("OR")
            pending_or = True
            continue
        if token in ("AND", "NOT", "NEAR"):
            raise BadQuery(f"{token} is not supported: words are all required; "
                             "use -word to exclude one")
        negate = token.startswith("-") and len(token) > 1
        if negate:
            token = token[1:]
        if token.startswith('"'):
            phrase = token[1:-1].strip()
            if not phrase:
                raise BadQuery("empty phrase")
            fragment = _quote(phrase)
        else:
            prefix = token.endswith("*")
            word = token.rstrip("*")
            if not re.search(r"\w", word):
                raise BadQuery(f"{token!r} has nothing to search for")
            fragment = _quote(word) + ("*" if prefix else "")
        if negate:
            if not query.terms or pending_or:
                raise BadQuery("-word excludes from other words; give at least one first")
            query.terms.append("NOT " + fragment)
        else:
            query.terms.append(fragment)
        pending_or = False
    if pending_or:
        raise BadQuery("OR needs a word on each side")
    query.terms = folded_terms(query.terms)
    check_size(query.terms)
    return query


def _apply_filter(query: Query, name: str, value: str) -> None:
    if not value:
        raise BadQuery(f"{name}: needs a value")
    if name == "tag":
        query.tags.append(value.lstrip("#").lower())
    elif name == "from":
        query.date_from = _date("from", value)
    elif name == "to":
        query.date_to = _date("to", value)
    elif name == "week":
        try:
            parse_week(value.upper())
        except ValueError:  # 2024-W99 too: a week no letter can have
            raise BadQuery(f"week: expects an ISO week like 2024-W13, not {value!r}") from None
        query.week = value.upper()
    elif name == "kind":
        if value not in ("week", "entry"):
            raise BadQuery("kind: is 'week' or 'entry'")
        query.kind = value


@dataclass
class Hit:
    entry: EntryRow
    snippet_html: str
    score: float


@dataclass
class Results:
    query: Query
    hits: list[Hit]
    has_more: bool


# What a hit shows: a listed entry, and its markdown for a lead where the index has none.
HIT = (*LISTED, Entry.body_md)
HITS = Prepared(sa.select(*HIT).where(Entry.id.in_(sa.bindparam("ids", expanding=True))))


def search(session: Session, text: str, *, limit: int = 20, offset: int = 0,
           include_drafts: bool = True, seconds: float | None = None) -> Results:
    """One page of results; `seconds` bounds the index's work (TooSlow past it)."""
    query = parse(text)
    with time_limit(session, seconds):
        return _search(session, query, limit, offset, include_drafts)


def _search(session: Session, query: Query, limit: int, offset: int,
            include_drafts: bool) -> Results:
    if not query.terms and not (query.tags or query.date_from or query.date_to
                                or query.week or query.kind):
        return Results(query, [], False)
    checks = ranking.Checks(tuple(query.tags), not include_drafts)  # looked up per row
    ranges = []  # indexed on entry: their ids bound the walk through the index
    if query.date_from:
        ranges.append(Entry.date >= query.date_from)
    if query.date_to:
        ranges.append(Entry.date <= query.date_to)
    if query.week:
        ranges.append(Entry.iso_week == query.week)
    if query.kind:
        ranges.append(Entry.kind == query.kind)
    if query.terms:
        found = _ranked(session, query, ranges, checks, limit + 1, offset)
    else:
        found = _filtered(session, ranges, checks, limit + 1, offset)
    leads = _leads(session, [entry.id for entry, _, snip in found[:limit] if not snip])
    hits = [
        Hit(entry, _snippet_html(snip) or html.escape(leads.get(entry.id) or _lead(entry)),
            float(score))
        for entry, score, snip in found[:limit]
    ]
    return Results(query, hits, len(found) > limit)


TAG_ROWS = sa.select(sa.func.count()).where(EntryTag.tag == sa.bindparam("tag"))


def _filtered(session: Session, ranges: list, checks: ranking.Checks, limit: int,
              offset: int) -> list:
    """The entries filters alone pick (no words), newest first: entries walked by date,
    each checked; or, where a tag: is rare enough that the walk would pass many entries
    for each it keeps, that tag's own rows, sorted (browse.tagged's two plans). A tag: on
    no entry, a misspelt one, walked all of the notebook (docs/PERFORMANCE.md, *Search*)."""
    tags = list(checks.tags)
    stmt = sa.select(*HIT).where(*ranges)
    if tags:
        counts = {tag: session.scalar(TAG_ROWS, {"tag": tag}) for tag in tags}
        rarest = min(tags, key=counts.__getitem__)
        if not counts[rarest]:
            return []
        if not browse.walks(session, list(counts.values()), offset + limit):
            stmt = stmt.join(EntryTag, sa.and_(EntryTag.entry_id == Entry.id,
                                               EntryTag.tag == rarest))
            tags.remove(rarest)
    stmt = stmt.where(*[sa.exists().where(EntryTag.entry_id == Entry.id, EntryTag.tag == tag)
                        .correlate(Entry) for tag in tags])
    if checks.published_only:
        stmt = stmt.where(Entry.status == "published")
    stmt = stmt.order_by(Entry.date.desc(), Entry.id.desc()).limit(limit).offset(offset)
    return [(entry, 0.0, "") for entry in rows(session, stmt)]


def _ranked(session: Session, query: Query, ranges: list, checks: ranking.Checks, limit: int,
            offset: int) -> list:
    fts, scored = query.fts, ranking.scoring(query.terms)
    scored_apart = scored != fts  # a phrase or an excluded word: bm25 scores the words
    tag_words = [_quote(t) for t in query.tags if re.search(r"[^\W_]", t)]
    if tag_words:  # found by the index too, checked exactly by ranking's filter
        tagged = f" AND {{tags body}} : ({' '.join(tag_words)})"
        fts, scored = f"({fts}){tagged}", f"({scored}){tagged}"
    if query.kind == "week":  # the letters' own doclist (kind_token), weighed 0 by bm25
        fts, scored = f"({fts}) AND kind : {LETTER_TOKEN}", f"({scored}) AND kind : {LETTER_TOKEN}"
    top = ranking.rank(session, query.terms, fts, ranges, checks, offset, limit + offset,
                       scored if scored_apart else None, letters=query.kind == "week")
    return _page(session, query, top)


def _page(session: Session, query: Query, top: list) -> list:
    """Entries and snippets for a page of (rowid, score), in rank order."""
    if not top:
        return []
    terms, cut = _snippet_terms(query.terms)
    snippets = ranking.matches(session, terms, " ".join(terms), [i for i, _ in top],
                               f"CASE WHEN length(body) <= {SNIPPET_MAX_CHARS} THEN "
                               "snippet(entry_fts, 2, :o, :c, '…', 16) END",
                               o=MARK_OPEN, c=MARK_CLOSE)
    snippets = {i: snippet for i, snippet in snippets.items() if snippet is not None}
    if cut:
        snippets = {i: _unmark(snippet, cut) for i, snippet in snippets.items()}
    found = {e.id: e for e in rows(session, HITS, {"ids": [i for i, _ in top]})}
    return [(found[i], score, snippets.get(i, "")) for i, score in top if i in found]


# FTS5's snippet() weighs every window of the text around every match: quadratic in the
# matches, which a hostile note makes the whole of its text (40,000 "`a " and "a*": seconds
# in one SQLite step no time limit can stop; bench/attack.py). A longer text shows its lead
# instead.
SNIPPET_MAX_CHARS = 20_000


# A word prefix longer than the index keeps ("check*"): FTS5 merges the doclists of every
# term it starts, over the whole index, in each statement that names it; for a page's
# snippets that was a third of "check*"'s time (docs/PERFORMANCE.md, *Search*). The page's
# rows are matches already, so their snippets are found by the prefix the index keeps
# ("chec*", read from one doclist), and a word it marked that the whole prefix does not
# start is unmarked.
LONG_PREFIX_RE = re.compile(r'"([A-Za-z0-9]+)"\*')
MARK_RE = re.compile(f"{MARK_OPEN}([^{MARK_CLOSE}]*){MARK_CLOSE}")


def _snippet_terms(terms: list[str]) -> tuple[list[str], list[tuple[str, str]]]:
    """The terms a page's snippets are found by, and (kept, whole) for each prefix cut to
    what the index keeps. A prefix is not cut where another word could mark the same
    words (it starts with the kept prefix), nor inside NOT (fewer rows would match)."""
    cut: list[tuple[str, str]] = []
    out = []
    for i, term in enumerate(terms):
        m = LONG_PREFIX_RE.fullmatch(term)
        if m and len(m[1]) > ranking.INDEXED_PREFIX:
            whole = m[1].lower()
            kept = whole[:ranking.INDEXED_PREFIX]
            others = [t for j, t in enumerate(terms) if j != i and t != "OR"]
            if not any(kept in t.lower() for t in others):
                cut.append((kept, whole))
                out.append(f'"{kept}"*')
                continue
        out.append(term)
    return out, cut


def _folded(text: str) -> str:
    """Lower case without diacritics, as the index's tokenizer folds a word."""
    return "".join(c for c in unicodedata.normalize("NFKD", text.lower())
                   if not unicodedata.combining(c))


def _unmark(snippet: str, cut: list[tuple[str, str]]) -> str:
    def check(m: re.Match[str]) -> str:
        words = _folded(m[1]).split()
        stray = words and all(any(w.startswith(kept) and not w.startswith(whole)
                                  for kept, whole in cut) for w in words)
        return m[1] if stray else m[0]

    return MARK_RE.sub(check, snippet)


def _snippet_html(snippet: str) -> str:
    escaped = html.escape(snippet or "")
    return escaped.replace(MARK_OPEN, "<mark>").replace(MARK_CLOSE, "</mark>")


LEAD = 200  # characters of a result that matched no words (a filter-only search)


def _leads(session: Session, ids: list[int]) -> dict[int, str]:
    """The start of each entry's text as the index keeps it: rendered plain text, so code
    keeps its `_` and `#` and no markdown syntax shows."""
    if not ids or not has_index(session):
        return {}
    texts = _run(session, "SELECT rowid, substr(body, 1, :n) FROM entry_fts "
                 f"WHERE rowid IN ({','.join(str(int(i)) for i in ids)})", {"n": LEAD * 2})
    return {rowid: _cut(text or "") for rowid, text in texts}


def _cut(text: str) -> str:
    text = " ".join(text.split())
    if len(text) <= LEAD:
        return text
    return text[:LEAD].rsplit(" ", 1)[0] + " …"


# Markdown syntax, not words: heading marks, emphasis and code fences at word edges, quote
# marks, link brackets (the text stays, the URL goes).
_SYNTAX_RE = re.compile(r"^\s{0,3}(?:#{1,6}\s|>\s?|[-*+]\s\[[ xX]\]\s)|(?<!\w)[*_`]+|[*_`]+(?!\w)"
                        r"|!?\[\[?|\]\]?(?:\([^)]*\))?", re.M)


def _lead(entry: EntryRow) -> str:
    """Without the index (another database): the markdown with its syntax taken out."""
    return _cut(_SYNTAX_RE.sub("", entry.body_md))
