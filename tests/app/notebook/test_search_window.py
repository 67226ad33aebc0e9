"""Search past the window (issue 14): a common word is ranked over its newest matches,
filters walk inside the index, and the letters' kind is a column of the index itself."""

import datetime as dt

import pytest
import sqlalchemy as sa

from app.models import Entry
from app.notebook import entries, letters, ranking, search, search_index
from tests.helpers import at_revision


def titles(db, q, **kw):
    with db.read() as session:
        return [h.entry.title for h in search.search(session, q, **kw).hits]


# -- ranking past the window (issue 14): a common word is ranked over its newest matches ---


@pytest.fixture
def small_window(monkeypatch):
    """The windows as small as a handful of entries, so a test needs no 100k notebook."""
    monkeypatch.setattr(ranking, "WINDOW", 4)
    monkeypatch.setattr(ranking, "HEAD_WINDOW", 2)


def add(db, *rows):
    with db.write() as session:
        for date, title, body, tags in rows:
            entries.create(session, author="x", date=date, title=title, body=body, tags=tags)


def test_newer_beats_older_on_a_tie(db):
    add(db, ("2024-01-01", "One", "same words here", []),
        ("2024-02-01", "Two", "same words here", []))
    assert titles(db, "words") == ["Two", "One"]


def test_title_beats_body_mentions_past_the_window(db, small_window):
    add(db, ("2020-01-01", "Gloo notes", "old", []),
        *[(f"2024-01-{d:02d}", f"Day {d}", "measured gloo today", []) for d in range(1, 10)])
    found = titles(db, "gloo")
    assert found[0] == "Gloo notes"
    assert found[1:5] == ["Day 9", "Day 8", "Day 7", "Day 6"]  # the window, ranked
    assert found[5:] == ["Day 5", "Day 4", "Day 3", "Day 2", "Day 1"]  # older, newest first


def test_excluded_words_drop_heads_wherever_they_stand(db, small_window):
    """A head (the word in its title) is dropped when an excluded word is in its title,
    tags or body, or starts a word there (a prefix as the index keeps it, and one longer),
    and only then."""
    add(db, ("2019-01-01", "Tensor kept", "old notes", []),
        ("2019-02-01", "Tensor nvlink", "old notes", []),
        ("2019-03-01", "Tensor tagged", "old notes", ["nvlink"]),
        ("2019-04-01", "Tensor body", "then nvlinkage twice", []),
        *[(f"2024-01-{d:02d}", f"Day {d}", "tensor in the body", []) for d in range(1, 10)])
    days = [f"Day {d}" for d in range(9, 0, -1)]
    assert titles(db, "tensor -absent", limit=50)[:2] == ["Tensor body", "Tensor tagged"]
    found = titles(db, "tensor -nvlink", limit=50)
    assert found[:2] == ["Tensor body", "Tensor kept"] and found[2:] == days
    for q in ("tensor -nvli*", "tensor -nvlin*", "tensor -nvlink -nvlinkage"):
        assert titles(db, q, limit=50) == ["Tensor kept", *days], q


def test_window_ranks_by_bm25_inside_it(db, small_window):
    add(db, *[(f"2024-01-{d:02d}", f"Day {d}", "nccl " + "filler " * 30, []) for d in range(1, 8)],
        ("2024-01-08", "Dense", "nccl nccl nccl", []))
    assert titles(db, "nccl")[0] == "Dense"


def test_pages_past_the_window_are_disjoint(db, small_window):
    add(db, *[(f"2024-01-{d:02d}", f"Day {d}", "bubble", []) for d in range(1, 13)])
    with db.read() as session:
        first = search.search(session, "bubble", limit=5)
        second = search.search(session, "bubble", limit=5, offset=5)
        third = search.search(session, "bubble", limit=5, offset=10)
    seen = [h.entry.title for r in (first, second, third) for h in r.hits]
    assert sorted(seen) == sorted(f"Day {d}" for d in range(1, 13))
    assert first.has_more and second.has_more and not third.has_more


def test_filters_apply_past_the_window(db, small_window):
    add(db, *[(f"2024-01-{d:02d}", f"Day {d}", "pipeline stage", ["pp"] if d % 3 else [])
              for d in range(1, 13)],
        ("2019-03-05", "Old pipeline", "pipeline", ["pp"]))
    assert set(titles(db, "pipeline tag:pp")) == (
        {f"Day {d}" for d in range(1, 13) if d % 3} | {"Old pipeline"})
    assert titles(db, "pipeline to:2020-01-01") == ["Old pipeline"]
    assert set(titles(db, "pipeline week:2024-W02")) == {f"Day {d}" for d in range(8, 15)
                                                          if d <= 12}
    assert titles(db, "pipeline -stage") == ["Old pipeline"]


def test_tag_from_the_body_still_filters(db, small_window):
    add(db, *[(f"2024-01-{d:02d}", f"Day {d}", "shard", []) for d in range(1, 8)],
        ("2024-01-09", "Body tag", "shard notes #zero", []))
    assert titles(db, "shard tag:zero") == ["Body tag"]


def test_every_filter_at_once_past_the_window_finds_what_a_scan_finds(db, small_window,
                                                                      monkeypatch):
    """A broad date range (more entries than FILTER_SET: checked per row with the rest), two
    tags and drafts hidden, all walked inside the index past the window: exactly the
    entries a plain scan of the rows keeps, each once, over pages."""
    monkeypatch.setattr(ranking, "FILTER_SET", 3)
    rows = [(f"2024-0{1 + d // 9}-{1 + d % 9:02d}", f"Day {d}", "stage " * (1 + d % 4),
             ["pp", "ops"][: d % 3]) for d in range(27)]
    with db.write() as session:
        for i, (date, title, body, tags) in enumerate(rows):
            entries.create(session, author="x", date=date, title=title, body=body, tags=tags,
                           status="draft" if i % 5 == 0 else "published")
    expected = {title for i, (date, title, _, tags) in enumerate(rows)
                if date >= "2024-01-05" and {"pp", "ops"} <= set(tags) and i % 5}
    query = "stage tag:pp tag:ops from:2024-01-05"
    found = titles(db, query, include_drafts=False, limit=50)
    assert len(found) == len(set(found)) and set(found) == expected and len(expected) > 4
    with db.read() as session:
        pages = [search.search(session, query, include_drafts=False, limit=3, offset=o)
                 for o in range(0, 12, 3)]
    assert [h.entry.title for p in pages for h in p.hits] == found
    owner = set(titles(db, query, limit=50))  # the owner sees the drafts too
    assert owner - set(found) and all(int(t.split()[1]) % 5 == 0 for t in owner - set(found))


def test_snippets_highlight_past_the_window(db, small_window):
    add(db, *[(f"2024-01-{d:02d}", f"Day {d}", f"intro text then collective number {d}", [])
              for d in range(1, 9)])
    with db.read() as session:
        for q in ("collective", "coll*", "collec*"):  # an indexed prefix and a longer one
            hits = search.search(session, q).hits
            assert len(hits) == 8
            assert all("<mark>collective</mark>" in h.snippet_html for h in hits), q


def test_title_index_follows_edits_and_deletes(db, small_window):
    add(db, *[(f"2024-01-{d:02d}", f"Day {d}", "warmup", []) for d in range(1, 8)],
        ("2020-01-01", "Old", "warmup", []))
    with db.write() as session:
        old = entries.get(session, next(h.entry.id for h in search.search(
            session, "warmup", limit=50).hits if h.entry.title == "Old"))
        entries.update(session, old, {"title": "Warmup schedule"}, base_revision=old.revision,
                       author="x")
    assert titles(db, "warmup")[0] == "Warmup schedule"
    with db.write() as session:
        first = search.search(session, "warmup").hits[0].entry.id
        entries.delete(session, entries.get(session, first))
    assert "Warmup schedule" not in titles(db, "warmup")


def test_a_walk_and_seeks_find_the_same_matches(db, monkeypatch):
    """matches() checks many ids by one walk through the index and a few by one seek
    each: both answer the same."""
    add(db, *[(f"2024-{m:02d}-{d:02d}", f"Day {m}-{d}", "gloo" if d % 2 else "nccl", [])
              for m in (1, 2) for d in range(1, 21)])
    with db.read() as session:
        ids = list(session.scalars(sa.select(Entry.id)))
        assert len(ids) > ranking.SEEKS
        walked = ranking.matches(session, ['"gloo"'], '"gloo"', ids)
        monkeypatch.setattr(ranking, "SEEKS", len(ids))
        sought = ranking.matches(session, ['"gloo"'], '"gloo"', ids)
    assert walked == sought and len(walked) == 20


def test_a_small_filter_set_is_walked_inside_the_index(db, small_window):
    """kind:week keeps only the letters, given to SQLite as the walk's id set: the
    letters that match, past the window too, and nothing else."""
    add(db, *[(f"2024-0{m}-0{d}", f"Note {m}-{d}", "shard", []) for m in range(1, 4)
              for d in range(1, 8)])
    with db.write() as session:
        for week in ("2024-W02", "2024-W07", "2024-W11"):
            letter, _ = letters.ensure_letter(session, week, author="x")
            entries.update(session, letter, {"body": "shard notes"}, author="x",
                           base_revision=letter.revision)
    found = titles(db, "kind:week shard")
    assert found == ["Week 2024-W11", "Week 2024-W07", "Week 2024-W02"]


def test_a_range_in_two_clusters_far_apart_is_ranked_as_bm25_ranks_it_whole(db):
    """A date range's old notes and a letter for one of their weeks written years later:
    ids far apart, with newer matches between them. Each cluster is walked and scored on
    its own (ranking._spans), and the order is still bm25's over every match the range
    allows, as one FTS5 statement gives it."""
    add(db, *[(f"2016-03-0{d}", f"Old {d}", "rank " * d + "filler " * (9 - d), [])
              for d in range(1, 7)],
        *[(f"2024-01-{d:02d}", f"New {d}", "rank measured", []) for d in range(1, 25)])
    with db.write() as session:
        letter, _ = letters.ensure_letter(session, "2016-W10", author="x")
        entries.update(session, letter, {"body": "rank rank rank filler"}, author="x",
                       base_revision=letter.revision)
    with db.read() as session:
        old = session.scalars(sa.select(Entry.id).where(Entry.date <= dt.date(2016, 12, 31))
                              ).all()
        assert max(old) - min(old) > 2 * (sorted(old)[-2] - min(old))  # two clusters
        expected = session.execute(sa.text(
            "SELECT e.title FROM entry_fts JOIN entry AS e ON e.id = entry_fts.rowid "
            "WHERE entry_fts MATCH '\"rank\"' AND e.date <= '2016-12-31' "
            "ORDER BY bm25(entry_fts, 10.0, 5.0, 1.0, 0.0), e.id DESC")).scalars().all()
        hits = search.search(session, "rank to:2016-12-31").hits
    assert [h.entry.title for h in hits] == expected and len(expected) == 7
    assert all(h.score < 0 for h in hits)  # every one scored, none left at 0.0


def test_tags_alone_page_the_same_whichever_plan_finds_them(db, monkeypatch):
    """A search of filters alone walks the entries newest first, or starts from its rarest
    tag's own rows (browse.walks): both give a plain scan's pages, with two tags, a date
    range and drafts hidden; a tag no entry carries finds nothing."""
    from app.notebook import browse
    with db.write() as session:
        for d in range(1, 25):
            entries.create(session, author="x", date=f"2024-01-{d:02d}", title=f"Day {d}",
                           body="text", status="draft" if d % 5 == 0 else "published",
                           tags=["all"] + (["some"] if d % 3 == 0 else []))
    days = range(24, 0, -1)
    cases = {"tag:all": [d for d in days],
             "tag:some tag:all": [d for d in days if d % 3 == 0],
             "tag:some from:2024-01-10": [d for d in days if d % 3 == 0 and d >= 10],
             "tag:nowhere": [], "tag:all tag:nowhere": []}
    for sorted_row in (0, 10**6):  # never walk, always walk
        monkeypatch.setattr(browse, "SORTED_ROW", sorted_row)
        for q, expected in cases.items():
            for drafts in (True, False):
                want = [f"Day {d}" for d in expected if drafts or d % 5]
                with db.read() as session:
                    pages = [search.search(session, q, limit=4, offset=o,
                                           include_drafts=drafts)
                             for o in range(0, len(want) + 4, 4)]
                assert [h.entry.title for p in pages for h in p.hits] == want, (q, drafts)
                assert [p.has_more for p in pages if p.hits] == (
                    [True] * ((len(want) - 1) // 4) + [False] if want else [])


def test_a_filter_set_larger_than_the_window_ranks_its_newest_and_finds_every_match(
        db, small_window):
    """With more letters than the window holds, the window is the newest letters: those
    that match are ranked by bm25, the older matches follow newest first; every matching
    letter is found once, pages stay disjoint, and no other entry slips in."""
    add(db, *[(f"2024-0{m}-0{d}", f"Note {m}-{d}", "shard shard shard", [])
              for m in range(1, 4) for d in range(1, 8)])
    bodies = {"2024-W02": "shard notes", "2024-W03": "shard shard shard shard",
              "2024-W05": "nothing", "2024-W06": "nothing", "2024-W07": "nothing",
              "2024-W08": "nothing", "2024-W09": "shard notes",
              "2024-W10": "shard shard shard", "2024-W11": "shard notes"}
    with db.write() as session:
        for week, body in bodies.items():
            letter, _ = letters.ensure_letter(session, week, author="x")
            entries.update(session, letter, {"body": body}, author="x",
                           base_revision=letter.revision)
    assert titles(db, "kind:week shard") == [  # window: W11, W10, W09, W08 (newest four)
        "Week 2024-W10", "Week 2024-W11", "Week 2024-W09", "Week 2024-W03", "Week 2024-W02"]
    with db.read() as session:
        pages = [search.search(session, "kind:week shard", limit=2, offset=o) for o in (0, 2, 4)]
    assert [h.entry.title for p in pages for h in p.hits] == titles(db, "kind:week shard")
    assert [p.has_more for p in pages] == [True, True, False]


def kinds_in_index(db) -> dict[str, str]:
    with db.read() as session:
        return dict(session.execute(sa.text(
            "SELECT e.title, f.kind FROM entry_fts AS f JOIN entry AS e ON e.id = f.rowid")).all())


def test_letters_carry_their_kind_in_the_index_through_edits(db):
    """kind:week is a doclist inside FTS5 (migration 0007): a letter's row holds the
    token, an entry's holds nothing, and an edit keeps them so. The column weighs 0; bm25
    divides by the row's length over every column, so the token lengthens a letter by one
    word: a letter and an entry with the same 60 words score within a percent."""
    body = "shard the optimizer " + "then measure each step again " * 11
    add(db, ("2024-03-12", "Shard plan", body, []))
    with db.write() as session:
        letter, _ = letters.ensure_letter(session, "2024-W11", author="x")
        entries.update(session, letter, {"body": body}, author="x",
                       base_revision=letter.revision)
        letter = entries.get(session, letter.id)
        entries.update(session, letter, {"title": "Shard plan"}, author="x",
                       base_revision=letter.revision)
    with db.read() as session:
        rows = session.execute(sa.text(
            "SELECT f.kind, e.kind FROM entry_fts AS f JOIN entry AS e ON e.id = f.rowid")).all()
        scores = {h.entry.kind: h.score for h in search.search(session, "shard optimizer").hits}
    assert sorted(rows) == [("", "entry"), (search_index.LETTER_TOKEN, "week")]
    assert scores["week"] == pytest.approx(scores["entry"], rel=0.01)
    assert titles(db, "kind:week optimizer") == ["Shard plan"]
    with db.read() as session:
        assert [h.entry.kind for h in search.search(session, "kind:week optimizer").hits] == [
            "week"]


def test_migration_0007_puts_the_letters_kind_into_an_existing_index(tmp_path):
    """A notebook indexed before 0007 (entry_fts of three columns) upgrades to the kind
    column with its letters marked, and kind:week finds them; downgrading gives the three
    columns back with the same rows."""
    from alembic import command

    from app import upgrades

    db, migrate = at_revision(tmp_path, "0006")
    with db.engine.begin() as conn:  # an entry and a letter as a 0006 notebook indexed them
        conn.exec_driver_sql(
            "INSERT INTO entry (id, kind, date, iso_week, title, slug, body_md, body_html, "
            "toc_html, tags, status, revision, created_at, updated_at) VALUES "
            "(1, 'entry', '2024-03-12', '2024-W11', 'Shard plan', 'shard-plan', 'shard', '', "
            "'', '', 'published', 1, '2024-03-12 00:00:00.000000', '2024-03-12 00:00:00.000000'),"
            "(2, 'week', '2024-03-11', '2024-W11', 'Week 2024-W11', '2024-w11', 'shard', '', "
            "'', '', 'published', 1, '2024-03-12 00:00:00.000000', '2024-03-12 00:00:00.000000')")
        conn.exec_driver_sql("INSERT INTO entry_fts (rowid, title, tags, body) VALUES "
                             "(1, 'Shard plan', '', 'shard'), (2, 'Week 2024-W11', '', 'shard')")
    assert sorted(upgrades.pending_migrations(db))[:6] == [  # and the later ones after
        "0007", "0008", "0009", "0010", "0011", "0012"]
    upgrades.upgrade(db, tmp_path / "backups")
    assert kinds_in_index(db) == {"Shard plan": "", "Week 2024-W11": search_index.LETTER_TOKEN}
    assert titles(db, "kind:week shard") == ["Week 2024-W11"]
    assert sorted(titles(db, "shard")) == ["Shard plan", "Week 2024-W11"]
    migrate(command.downgrade, "0006")
    with db.engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT rowid, title, tags, body FROM entry_fts "
                                    "ORDER BY rowid").all() == [
            (1, "Shard plan", "", "shard"), (2, "Week 2024-W11", "", "shard")]


def test_a_long_prefix_finds_its_snippets_by_the_prefix_the_index_keeps(db):
    """check* (longer than the 4-letter prefixes the index keeps) finds the same entries
    in the same order; their snippets are found through "chec"*, and a word only the
    shorter prefix reaches (checa, Chécz) is not marked, while check... words are."""
    add(db, ("2024-03-01", "Saving", "the checkpoint lands next to checa and Chécz", []),
        ("2024-03-02", "Only checa", "checa and chec but nothing longer", []),
        ("2024-03-03", "Sums", "a checksum; Checking it twice", []))
    assert search._snippet_terms(['"check"*']) == (['"chec"*'], [("chec", "check")])
    # another word the kept prefix could mark, or a NOT: not cut
    assert search._snippet_terms(['"check"*', '"checa"'])[1] == []
    assert search._snippet_terms(['"save"', 'NOT "checkpoint"*'])[1] == []
    with db.read() as session:
        hits = search.search(session, "check*").hits
    assert [h.entry.title for h in hits] == ["Sums", "Saving"]
    snippets = {h.entry.title: h.snippet_html for h in hits}
    assert "<mark>checkpoint</mark>" in snippets["Saving"]
    assert "<mark>checa" not in snippets["Saving"] and "<mark>Chécz" not in snippets["Saving"]
    assert "<mark>checksum</mark>" in snippets["Sums"] and "<mark>Checking</mark>" in snippets[
        "Sums"]
