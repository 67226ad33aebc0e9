"""A link is listed among the backlinks of the entry it opens, and of no other: a
[[2024-03-04]] the day's letter, else the day's first entry; a [[Title]] the newest entry
of that title; a [[2024-W10]] the week's letter (entries.resolve). Every entry of a day
used to list the day's links: at 100k entries, ~27 a day, most of an entry page's lines."""

from __future__ import annotations

import sqlite3

from app.notebook import browse, entries, letters
from tests.helpers import create_entry


def create(db, title, date, body="x"):
    with db.write() as session:
        return entries.create(session, author="me@example.com", title=title, date=date,
                              body=body).id


def listed_on(db, ids):
    """For each entry: the ids of the entries its backlinks list, and their count."""
    with db.read() as session:
        found = {}
        for entry_id in ids:
            entry = entries.get(session, entry_id)
            shown, total = browse.newest_backlinks(session, entry, 10, include_drafts=True)
            paged, paged_total = browse.backlinks(session, entry, include_drafts=True, limit=10)
            assert [b.id for b in shown] == [b.source.id for b in paged]  # page, API agree
            assert total == paged_total == len(shown)
            found[entry_id] = [b.id for b in shown]
        return found


def opened_by(db, target):
    with db.read() as session:
        return entries.resolve(session, target).id


def test_a_date_link_is_listed_on_the_days_first_entry_then_on_its_letter(db):
    first = create(db, "Morning", "2024-03-04")  # a Monday: 2024-W10's letter is dated so
    second = create(db, "Evening", "2024-03-04")
    other_day = create(db, "Tuesday", "2024-03-05")
    source = create(db, "Source", "2024-03-20", body="Back to [[2024-03-04]].")
    assert opened_by(db, "2024-03-04") == first
    assert listed_on(db, [first, second, other_day]) == {
        first: [source], second: [], other_day: []}
    with db.write() as session:
        letter = letters.ensure_letter(session, "2024-W10", "x")[0].id
    assert opened_by(db, "2024-03-04") == letter  # letters come first
    assert listed_on(db, [letter, first, second]) == {letter: [source], first: [], second: []}
    with db.write() as session:  # its letter gone, the day's first entry is reached again
        entries.delete(session, entries.get(session, letter))
    assert listed_on(db, [first, second]) == {first: [source], second: []}


def test_a_title_link_is_listed_on_the_newest_entry_of_that_title(db):
    older = create(db, "Standup", "2024-01-08")
    newer = create(db, "standup", "2024-02-05")
    tied = create(db, "STANDUP", "2024-02-05")  # the same day: the later one is newer
    source = create(db, "Source", "2024-03-01", body="Notes from [[Standup]].")
    assert opened_by(db, "Standup") == tied
    assert listed_on(db, [older, newer, tied]) == {older: [], newer: [], tied: [source]}
    letter_linker = create(db, "Week linker", "2024-03-02", body="[[2024-w06]]")
    with db.write() as session:
        letter = letters.ensure_letter(session, "2024-W06", "x")[0].id  # dated 2024-02-05
    # a letter is its week's, and now its day's; the two entries of that day are neither
    assert listed_on(db, [letter, newer, tied]) == {letter: [letter_linker], newer: [],
                                                    tied: [source]}


def test_a_title_that_reads_as_a_date_is_not_reached_by_that_date(db):
    day = create(db, "Plain", "2024-03-05")
    named = create(db, "2024-03-05", "2024-06-01")  # [[2024-03-05]] opens the day, not it
    source = create(db, "Source", "2024-07-01", body="[[2024-03-05]]")
    assert opened_by(db, "2024-03-05") == day
    assert listed_on(db, [day, named]) == {day: [source], named: []}


def test_the_entry_page_lists_a_days_links_only_on_the_entry_they_open(client):
    first = create_entry(client, title="First of the day", date="2024-05-06", body="a")
    second = create_entry(client, title="Second of the day", date="2024-05-06", body="b")
    create_entry(client, title="Linker", date="2024-05-20", body="Since [[2024-05-06]].")
    assert 'class="backlinks"' in client.get(f"/entries/{first}", follow_redirects=True).text
    assert 'class="backlinks"' not in client.get(f"/entries/{second}",
                                                 follow_redirects=True).text
    api = client.get(f"/api/v1/entries/{second}/backlinks").get_json()
    assert api["backlinks"] == [] and api["total"] == 0


def test_telling_which_links_reach_an_entry_is_index_seeks(db):
    create(db, "Some title", "2024-03-04")
    with sqlite3.connect(db.sqlite_path) as conn:
        for prepared in browse.PASSED_OVER.values():
            plan = [row[3] for row in conn.execute(
                f"EXPLAIN QUERY PLAN {prepared.sql}",
                {"kind_1": "week", "date": "2024-03-04", "id": 1, "title": "Some title"})]
            searches = [step for step in plan if "entry" in step]
            assert searches and all(step.startswith(("SEARCH entry USING COVERING INDEX",
                                                     "SEARCH entry_alias USING COVERING INDEX",
                                                     "SEARCH entry_1 USING INTEGER PRIMARY KEY"))
                                    or "ix_entry_title_key" in step for step in searches), plan
