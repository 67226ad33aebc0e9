"""What one search may cost: each word once, a few words, prefixes and OR'd alternatives at
most, and a time limit on the index's work. A search is a few words a person typed; a query
of 83 copies of a* OR'd together, or 16 of them at once, are a way to burn the web's CPU.
"""

from __future__ import annotations

import sqlite3
import time
from contextlib import contextmanager

import sqlalchemy as sa
from sqlalchemy.orm import Session

from app.errors import BadQuery

# Each word is a doclist FTS5 merges, a prefix (a*) is
# the doclists of every word it starts, and each alternative of an OR is a query of its own;
# a few of each is all a person types, and many of them at once are a way to burn CPU.
MAX_WORDS = 16
MAX_PREFIXES = 4
MAX_ALTERNATIVES = 8
def folded_terms(terms: list[str]) -> list[str]:
    """The same query with each word once: FTS5 reads "a b OR c" as a OR'd list of
    conjunctions (OR binds loosest), so a word repeated in a conjunction, or a conjunction
    repeated, asks nothing more, and is dropped (83 copies of a* OR'd are one a*)."""
    alternatives: list[list[str]] = [[]]
    for term in terms:
        if term == "OR":
            alternatives.append([])
        elif term not in alternatives[-1]:
            alternatives[-1].append(term)
    kept: list[tuple[str, ...]] = []
    for alternative in map(tuple, alternatives):
        if alternative not in kept:
            kept.append(alternative)
    folded: list[str] = []
    for alternative in kept:
        folded += (["OR"] if folded else []) + list(alternative)
    return folded


def check_size(terms: list[str]) -> None:
    words = [t for t in terms if t != "OR"]
    if len(words) > MAX_WORDS:
        raise BadQuery(f"a search may have at most {MAX_WORDS} words; this one has "
                       f"{len(words)}")
    prefixes = sum(t.endswith("*") for t in words)
    if prefixes > MAX_PREFIXES:
        raise BadQuery(f"a search may have at most {MAX_PREFIXES} words ending in *; this one "
                       f"has {prefixes}")
    alternatives = terms.count("OR") + 1
    if alternatives > MAX_ALTERNATIVES:
        raise BadQuery(f"a search may have at most {MAX_ALTERNATIVES} alternatives joined by "
                       f"OR; this one has {alternatives}")


class TooSlow(BadQuery):
    """A search that ran past its time: the index's work is stopped, not the answer."""

    status = 422
    code = "too_slow"


# sqlite3 calls the progress handler every this many virtual machine instructions: often
# enough to stop within a few milliseconds of the limit, rarely enough to cost nothing.
PROGRESS_STEPS = 1_000


@contextmanager
def time_limit(session: Session, seconds: float | None):
    """Stop the statements run inside once `seconds` have passed (sqlite3's progress
    handler interrupts them): TooSlow, naming the limit, instead of a search that holds
    a thread and a core for as long as its query takes."""
    if not seconds:
        yield
        return
    dbapi = session.connection().connection.dbapi_connection
    deadline = time.monotonic() + seconds
    dbapi.set_progress_handler(lambda: time.monotonic() > deadline, PROGRESS_STEPS)
    try:
        yield
    # sqlite3's own error where a statement ran straight on the connection (db.Prepared)
    except (BadQuery, sa.exc.OperationalError, sqlite3.OperationalError) as exc:
        if "interrupted" not in str(exc):
            raise
        session.rollback()
        raise TooSlow(f"this search took longer than {seconds:g} s, the most one may take "
                      "here; use fewer words, or longer ones before a *") from None
    finally:
        try:
            dbapi.set_progress_handler(None, 0)
        except sqlite3.ProgrammingError:
            pass  # the pool closed the connection (handler and all) on the way out
