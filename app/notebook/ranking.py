"""Ranked search inside FTS5 at any size: bm25 over a bounded window of the matches, not
over every match, so a word in every entry costs what a rare one does. search.py parses
the query language and calls rank(); this module owns the statements.
"""

from __future__ import annotations

import json
import operator
import sqlite3
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.dialects import sqlite
from sqlalchemy.orm import Session

from app.errors import BadQuery
from app.notebook import search_index

# Title and tags matter more than a passing mention in the body.
WEIGHTS = (10.0, 5.0, 1.0, 0.0)  # title, tags, body; kind (search.kind_token) scores nothing


def run(session: Session, sql: str, params: dict) -> list[tuple]:
    """One of search's statements, straight on the session's sqlite3 connection (its
    transaction: the page reads one snapshot): SQLAlchemy's work per execution of a text
    statement was a tenth of a rare word's search (docs/PERFORMANCE.md, *Search*)."""
    dbapi = session.connection().connection.dbapi_connection
    try:
        return dbapi.execute(sql, params).fetchall()
    except sqlite3.OperationalError as exc:  # FTS5 syntax we failed to prevent
        session.rollback()
        raise BadQuery(f"cannot search for that: {exc}") from None


# Ranking. bm25 over every match costs O(matches), however small the page
# (docs/PERFORMANCE.md, *Search*, has the figures of this comment). So bm25 runs over a
# bounded window, inside FTS5: the doclists are walked newest first (ORDER BY rowid DESC
# stops early), and the window's rows are scored by a second statement, in
# entry_fts_recent when the window lies among the newest entries it holds (bm25 first
# counts each word's rows in the whole table, a fraction of that there; search_index.py):
#
#   * up to WINDOW matches (that the filters allow): all of them, in bm25's own order
#     (weights title 10, tags 5, body 1), ties to the newer entry;
#   * more than that: first the heads, the newest HEAD_WINDOW matches with a query word in
#     the title or tags (found in entry_fts_heads, an index of titles and tags alone, and
#     ranked by how well those match), then the others among the newest WINDOW matches in
#     bm25's order, then older matches, newest first, unscored (score 0.0). Without a date,
#     week or kind range, that window stops at the recent entries' index floor: it is the
#     newest WINDOW matches among the newest 10-20k entries, scored there. (A phrase of two
#     common words, "memory bandwidth", has its newest 400 matches spread over half of a
#     100k notebook; scored in entry_fts, bm25 counted both words over all of them, most of
#     the query's time.) With a range, the window is the range's own, wherever it
#     lies: the user asked for that time.
#
# So a word in the title or tags always beats a mention in the body, as bm25's weights
# nearly always decide anyway, and among a common word's thousands of body mentions the
# recent ones compete. Filters apply before windowing: dates, weeks and kinds bound the
# walk by id spans (and a set of them larger than the window, such as the letters, makes
# the window its newest WINDOW entries); a tag: is matched in the index too (its words in
# the tags or body, where #tags live) then checked exactly, so the tag's words add to the
# score.
#
# Why ranges and not id lists: FTS5 runs `MATCH ... AND rowid IN (...)` once per id, and
# bm25 there counts every match again per id (milliseconds for a common word); an id list
# is fine only without bm25 (snippets, checking a few ids), and not for a prefix longer
# than the index keeps, which merges its terms again per id (then one walk instead).
HEAD_WINDOW = 100
WINDOW = 400
FILTER_SET = 5000  # up to this many entries in a range: their ids bound the walk (_spans)
INDEXED_PREFIX = 4  # the index keeps prefixes up to this long (migration 0005)


@dataclass(frozen=True)
class Checks:
    """The filters looked up per row of a walk: each tag the entry must carry, and whether
    only published entries count (a viewer's search)."""

    tags: tuple[str, ...] = ()
    published_only: bool = False


def rank(session: Session, terms: list[str], fts: str, ranges: list, checks: Checks,
         offset: int, want: int, scored: str | None = None,
         letters: bool = False) -> list[tuple[int, float]]:
    """(rowid, score) of the matches of fts (the query's terms, a tag: in the index too) at
    [offset:want] in the order above; ranges (conditions on Entry: indexed, so their ids
    bound the walk) and checks are the filters. `scored` (scoring(terms), with the same
    tag: part), when it differs from fts, is what bm25 scores the window's matches by.
    `letters`: fts matches letters only (kind:week), which the recent entries' index
    holds whatever their age."""
    keep, spans = _filter(session, ranges, checks)
    if not spans:
        return []
    window, edge = _window_spans(keep, spans)
    # the newest matches found unscored, then scored by their words; both in the recent
    # entries' index as far as it holds them all (search_index.py)
    recent = search_index.recent_floor(session)
    if letters and recent is not None:
        recent = 0  # it holds every match
    # one more than the window: whether there are more matches than it holds
    newest, floor = _window(session, "entry_fts", fts, keep, window, WINDOW + 1, False, recent)
    floor = edge if floor is None else floor
    if floor is None:  # every match seen: bm25 alone
        return _order(_scores(session, scored or fts, [rowid for rowid, _ in newest],
                              recent))[offset:want]
    scored_rows = newest[:WINDOW]
    if spans == [(None, None)] and recent:  # no range: the window stops at the floor
        scored_rows = [row for row in scored_rows if row[0] >= recent]
    body = _scores(session, scored or fts, [rowid for rowid, _ in scored_rows], recent)
    heads = _heads(session, terms, fts, keep, spans)
    head_ids = {rowid for rowid, _ in heads}
    ranked = _order(heads) + _order([row for row in body if row[0] not in head_ids])
    ranked += [row for row in newest[len(scored_rows):] if row[0] not in head_ids]
    if len(ranked) < want:  # past the window: older matches, newest first
        older = [(lo, floor - 1 if hi is None else min(hi, floor - 1))
                 for lo, hi in spans if lo is None or lo < floor]
        rest, _ = _window(session, "entry_fts", fts, keep, older,
                          want - len(ranked) + len(head_ids), False, recent)
        ranked += [row for row in rest if row[0] not in head_ids]
    return ranked[offset:want]


def _window_spans(keep: Keep | None, spans: list) -> tuple[list, int | None]:
    """The spans the scored window walks, and where they stop short of the filter's end
    (None: they don't). With a small filter set (the letters, a date range) larger than
    the window, the window is its newest WINDOW entries: a word common in the notebook but
    in few of them would otherwise walk its matches through everything the set skips
    ("kind:week shard" walked 28k matches for 400 letters; docs/PERFORMANCE.md, *Search*)."""
    if keep is None or keep.newest is None or len(keep.newest) <= WINDOW:
        return spans, None
    edge = keep.newest[WINDOW - 1]
    return [(edge if lo is None or lo < edge else lo, hi) for lo, hi in spans
            if hi is None or hi >= edge], edge


def scoring(terms: list[str]) -> str:
    """What bm25 scores a window by: the query's words, each phrase as its words, excluded
    words left out (they score nothing in a row that matches). bm25 first counts, over
    the whole index, the rows each phrase of the query matches: for a phrase that means
    checking the positions in every row holding its words, several times the cost of
    counting its words alone (docs/PERFORMANCE.md, *Search*)."""
    parts = []
    for term in terms:
        if term.startswith("NOT "):
            continue
        if term.startswith('"') and term.endswith('"') and " " in term.strip('"'):
            words = term[1:-1].replace('""', '"').split()
            term = "(" + " ".join('"' + w.replace('"', '""') + '"' for w in words) + ")"
        parts.append(term)
    return " ".join(parts)


def _scores(session: Session, fts: str, ids: list[int],
            recent: int | None) -> list[tuple[int, float]]:
    """(rowid, bm25 of fts) for ids, in their order: a walk through the matches of fts
    between the lowest and the highest id, in entry_fts_recent when it holds them all (the
    ids from `recent` on: search_index.recent_floor). Its bm25 counts a word's rows among
    the recent entries where entry_fts counted all (a fraction of the cost;
    docs/PERFORMANCE.md, *Search*): the same scores in a notebook the recent index holds
    whole, and in a larger one the recent entries' word statistics. Ids in two clusters far apart (a
    date range's old entries and the letters the notebook got later) are two walks, each
    over its own cluster: one walk through the gap between them checked every match of
    "rank" in 95,000 ids, most of "to:2016-06-30 rank"'s time."""
    if not ids:
        return []
    table = "entry_fts_recent" if recent is not None and min(ids) >= recent else "entry_fts"
    newest = sorted(ids, reverse=True)
    found: dict = {}
    for lo, hi in _spans(newest, (newest[0] - newest[-1]) // 2):
        found.update(run(
            session,
            f"SELECT rowid, bm25({table}, {', '.join(map(str, WEIGHTS))}) FROM {table} "
            f"WHERE {table} MATCH :q AND +rowid IN (SELECT value FROM json_each(:ids)) "
            "AND rowid >= :lo AND rowid <= :hi",
            {"q": fts, "ids": json.dumps([i for i in ids if lo <= i <= hi]), "lo": lo,
             "hi": hi}))
    return [(rowid, found.get(rowid, 0.0)) for rowid in ids]


def _order(rows: list) -> list:
    return sorted(rows, key=lambda row: (row[1], -row[0]))


def _heads(session: Session, terms: list[str], fts: str, keep, spans) -> list:
    """Up to HEAD_WINDOW matches of fts among the newest 2 x HEAD_WINDOW entries that the
    filters allow with a (not excluded) query word in the title or tags, scored by bm25
    over entry_fts_heads (10, 5)."""
    words = [t for t in terms if t != "OR" and not t.startswith("NOT ")]
    if not words:
        return []
    found, _ = _window(session, "entry_fts_heads", " OR ".join(words), keep, spans,
                       HEAD_WINDOW * 2, True)
    found_ids = [rowid for rowid, _ in found]
    if len(words) == 1:  # (an OR has a word on each side)
        # One word (or phrase, or prefix): a head holds it, as the index does; a tag:'s
        # part of fts is the filters' own exact check (keep), which the walk applied. So
        # only the excluded words are left to check: a walk through their matches, not
        # through the word's ("tensor -nvlink": 200 heads across the notebook)
        excluded = [t.removeprefix("NOT ") for t in terms if t.startswith("NOT ")]
        out = matches(session, excluded, " OR ".join(excluded), found_ids) if excluded else {}
        return [row for row in found if row[0] not in out][:HEAD_WINDOW]
    matching = matches(session, terms, fts, found_ids)
    return [row for row in found if row[0] in matching][:HEAD_WINDOW]


SEEKS = 32  # up to this many ids are checked one seek each; more, by one walk,
SPAN_PER_ID = 200  # as are a few ids close together (less than this apart on average)


def matches(session: Session, terms: list[str], fts: str, ids: list[int],
            column: str = "0", **params) -> dict:
    """{rowid: column} for those ids that match fts: one seek per id for a few ids far
    apart (a page's snippets past the window), or one walk through the matches between
    the lowest and the highest id, each checked against the list: for many ids (the
    heads), a few close together, and where a prefix is longer than the index keeps (each
    seek would merge its terms again). A seek into a common word's doclist is not cheap:
    the heads' 200 seeks for "pipeline bubble" cost fifty times the walk through the same
    span (docs/PERFORMANCE.md, *Search*)."""
    if not ids:
        return {}
    listed = ",".join(str(int(i)) for i in ids)
    long_prefix = any(t.endswith("*") and len(t.removeprefix("NOT ")) - 3 > INDEXED_PREFIX
                      for t in terms)  # '"coll"*' is a prefix of 4
    where = (f"+rowid IN ({listed}) AND rowid >= {min(ids)} AND rowid <= {max(ids)}"
             if long_prefix or len(ids) > SEEKS or max(ids) - min(ids) < SPAN_PER_ID * len(ids)
             else f"rowid IN ({listed})")
    return dict(run(session,
                    f"SELECT rowid, {column} FROM entry_fts WHERE entry_fts MATCH :q AND {where}",
                    {"q": fts, **params}))


class Keep:
    """What the filters allow, as conditions of the walk's own SQL, so SQLite skips the
    rows they refuse as it walks and a LIMIT still stops it early: each tag as an EXISTS on
    entry_tag's key; dates, weeks, kinds and drafts as an EXISTS on the entry row (a seek
    by its primary key per row walked). `newest`: the ids the ranges allow, newest first,
    when there are at most FILTER_SET of them (None: no ranges, or a broad one).

    They were applied in Python to batches of 200 matches: "kind:week shard" walked every
    match of a common word to keep the letters', "tag:travel gradient" spent almost half
    its time in the batches' queries. A small set's ids then went in as a json_each list,
    whose index SQLite built again in every statement, several times what the entry row's
    EXISTS costs the same walk. (A tag checked through the entry row, as SQLAlchemy's
    nested EXISTS had it, made the heads' walk slower too; docs/PERFORMANCE.md, *Search*.)"""

    def __init__(self, checks: Checks, where: str = "", params: dict | None = None,
                 newest: list[int] | None = None):
        self.params = dict(params or {})
        self.sql = ""
        self.newest = newest
        for i, tag in enumerate(checks.tags):
            self.params[f"tag{i}"] = tag
            self.sql += (" AND EXISTS (SELECT 1 FROM entry_tag WHERE entry_tag.entry_id = "
                         f"{{table}}.rowid AND entry_tag.tag = :tag{i})")
        on_row = [where] if where else []
        on_row += ["entry.status = 'published'"] if checks.published_only else []
        if on_row:
            self.sql += (" AND EXISTS (SELECT 1 FROM entry WHERE entry.id = {table}.rowid AND "
                         + " AND ".join(on_row) + ")")


NAMED = sqlite.dialect(paramstyle="named")  # ranges compiled to :name binds


def _compiled(ranges: list) -> tuple[str, dict]:
    """Conditions on Entry as SQL and its parameters, each as the column type stores it."""
    compiled = sa.and_(*ranges).compile(dialect=NAMED)
    params = {}
    for bind, name in compiled.bind_names.items():
        processor = bind.type.dialect_impl(NAMED).bind_processor(NAMED)
        value = bind.effective_value
        params[name] = processor(value) if processor else value
    return str(compiled), params


def _filter(session: Session, ranges: list, checks: Checks):
    """(keep, spans): keep holds the filters as SQL (None: no filters); spans are
    (lowest, highest) id ranges worth walking, newest first; [] when nothing is. The ids
    a range allows come back as one string: fetched as rows through the ORM, the 5,001 of
    "from:2025-06-01" were a third of the query (docs/PERFORMANCE.md, *Search*)."""
    if not ranges:
        return (None if checks == Checks() else Keep(checks)), [(None, None)]
    where, params = _compiled(ranges)
    listed = run(session, f"SELECT group_concat(id) FROM (SELECT id FROM entry WHERE {where} "
                          f"LIMIT {FILTER_SET + 1})", params)[0][0]
    if listed is None:
        return None, []
    ids = sorted(map(int, listed.split(",")), reverse=True)
    if len(ids) <= FILTER_SET:
        return Keep(checks, where, params, ids), _spans(ids, 1)
    # a broad range: walked between its lowest and highest id, checked per row
    span = run(session, f"SELECT min(id), max(id) FROM entry WHERE {where}", params)[0]
    return Keep(checks, where, params), [tuple(span)]


def _spans(ids: list[int], wider_than: int) -> list[tuple[int, int]]:
    """Ids (descending) as (lowest, highest) ranges, newest first: two, split at the
    widest gap, when that gap is wider than `wider_than`; else one. Each range is a
    statement of its own, and bm25 counts a common word over the whole index once per
    statement: so at most two ("kind:week shard" over four was slow;
    docs/PERFORMANCE.md, *Search*)."""
    gaps = list(map(operator.sub, ids, ids[1:]))
    widest = max(gaps, default=0)
    if widest <= wider_than:
        return [(ids[-1], ids[0])]
    cut = gaps.index(widest) + 1
    return [(ids[cut - 1], ids[0]), (ids[-1], ids[cut])]


def _window(session: Session, table: str, fts: str, keep: Keep | None, spans, n: int,
            score: bool, recent: int | None = None):
    """The newest n matches of fts in table that keep allows, walking spans in turn, as
    (rowid, bm25 or 0.0); and the lowest rowid walked when it stopped before the end.
    Unscored, the part of a span from `recent` up is walked in entry_fts_recent, which holds
    every entry there (search_index.py): a prefix longer than the index keeps ("check*")
    merges its terms over all of the table it names, a fraction of entry_fts's cost
    there (docs/PERFORMANCE.md, *Search*)."""
    weights = WEIGHTS if table == "entry_fts" else WEIGHTS[:2]  # entry_fts_heads: title, tags
    params = {"q": fts, **(keep.params if keep else {})}
    walks = []
    for lo, hi in spans:
        if recent is not None and not score and (hi is None or hi >= recent):
            walks.append(("entry_fts_recent", recent if lo is None else max(lo, recent), hi))
            if recent > 1 and (lo is None or lo < recent):  # ids start at 1
                walks.append((table, lo, recent - 1))
        else:
            walks.append((table, lo, hi))
    kept: list = []
    for name, lo, hi in walks:
        rank = f"bm25({name}, {', '.join(map(str, weights))})" if score else "0.0"
        where = f"{name} MATCH :q"
        where += "" if lo is None else f" AND rowid >= {int(lo)}"
        where += "" if hi is None else f" AND rowid <= {int(hi)}"
        where += keep.sql.replace("{table}", name) if keep else ""
        sql = (f"SELECT rowid, {rank} FROM {name} WHERE {where} ORDER BY rowid DESC "
               f"LIMIT {n - len(kept)}")
        kept += run(session, sql, params)
        if len(kept) >= n:
            return kept, kept[-1][0]
    return kept, None
