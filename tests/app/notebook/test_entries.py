"""Saving entries: revisions, conflicts, links and backlinks, tags, letters."""

import pytest
import sqlalchemy as sa

from app import errors
from app.models import Entry, Revision
from app.notebook import browse, entries, letters, saving
from tests.helpers import count


def create(db, **fields):
    fields.setdefault("date", "2024-03-27")
    fields.setdefault("title", "Parallelism")
    with db.write() as session:
        return entries.create(session, author="me@example.com", **fields)


def test_every_save_is_a_revision_with_author_and_full_text(db):
    entry = create(db, body="first")
    with db.write() as session:
        e = entries.get(session, entry.id)
        entries.update(session, e, {"body": "second"}, base_revision=1, author="laptop")
    with db.read() as session:
        revs = browse.revisions(session, entries.get(session, entry.id))
        assert [(r.number, r.body_md, r.author) for r in revs] == [
            (2, "second", "laptop"), (1, "first", "me@example.com")]


def test_saving_the_same_text_makes_no_empty_revision(db):
    entry = create(db, body="same")
    with db.write() as session:
        e = entries.get(session, entry.id)
        entries.update(session, e, {"body": "same"}, base_revision=1, author="x")
        assert e.revision == 1


def test_two_devices_editing_the_same_base_conflict_and_nothing_is_lost(db):
    entry = create(db, body="original")
    with db.write() as session:  # the phone saves first
        entries.update(session, entries.get(session, entry.id), {"body": "from phone"},
                       base_revision=1, author="phone")
    with pytest.raises(errors.Conflict) as caught, db.write() as session:  # then the laptop
        entries.update(session, entries.get(session, entry.id), {"body": "from laptop"},
                       base_revision=1, author="laptop")
    assert caught.value.current["body"] == "from phone"
    with db.read() as session:
        e = entries.get(session, entry.id)
        assert (e.body_md, e.revision) == ("from phone", 2)
    assert count(db, Entry) == 1
    # the laptop merges on top of the current revision
    with db.write() as session:
        entries.update(session, entries.get(session, entry.id),
                       {"body": "from phone\nfrom laptop"}, base_revision=2, author="laptop")
    with db.read() as session:
        assert entries.get(session, entry.id).body_md == "from phone\nfrom laptop"


def test_restore_is_a_new_revision(db):
    entry = create(db, body="v1", tags=["a"])
    with db.write() as session:
        entries.update(session, entries.get(session, entry.id), {"body": "v2", "tags": []},
                       base_revision=1, author="x")
    with db.read() as reader:
        prepared = saving.prepare_restore(reader, entry.id, 1, base_revision=2)
    with db.write() as session:
        e = saving.commit(session, prepared, author="x")
        assert (e.revision, e.body_md, e.tag_list) == (3, "v1", ["a"])
    with db.read() as session:
        rev = browse.revision(session, entries.get(session, entry.id), 3)
        assert rev.note == "restored revision 1"


@pytest.mark.parametrize("fields, field", [
    ({"title": ""}, "title"), ({"title": "x" * 201}, "title"), ({"date": "2024-02-30"}, "date"),
    ({"date": "yesterday"}, "date"), ({"date": 20240101}, "date"), ({"tags": ["9lives"]}, "tags"),
    ({"tags": [1, 2]}, "tags"), ({"tags": ["<script>"]}, "tags"), ({"status": "secret"}, "status"),
    ({"body": 5}, "body"), ({"body": "x" * 1_000_001}, "body"),
])
def test_invalid_fields_are_refused_with_the_field_named_and_nothing_saved(db, fields, field):
    with pytest.raises(errors.Invalid) as caught, db.write() as session:
        entries.create(session, author="x", **{"date": "2024-01-01", "title": "t", **fields})
    assert caught.value.field == field
    assert count(db, Entry) == 0
    assert count(db, Revision) == 0


def test_wiki_links_resolve_and_feed_backlinks_with_context(db):
    source = create(db, title="Reading", body="On pipelines see [[GPipe paper|the paper]] and "
                    "[[2024-W13]].\n\nUnrelated paragraph.")
    with db.read() as session:
        html = entries.get(session, source.id).body_html
        assert 'class="wikilink missing"' in html and "/entries/new?title=GPipe%20paper" in html
    target = create(db, title="GPipe paper", date="2024-03-28", body="bubbles")
    with db.read() as session:
        # the earlier link starts working as soon as its target exists
        html = entries.get(session, source.id).body_html
        assert f'href="/entries/{target.id}/gpipe-paper"' in html
        assert "wikilink missing" not in html.split("the paper")[0].rsplit("<a", 1)[1]
        back, total = browse.backlinks(session, entries.get(session, target.id),
                                       include_drafts=True, limit=10)
        assert total == 1
        assert [b.source.id for b in back] == [source.id]
        assert "On pipelines see the paper" in back[0].context
    with db.write() as session:
        letter, _ = letters.ensure_letter(session, "2024-W13", "x")
    with db.read() as session:
        back, _ = browse.backlinks(session, letter, include_drafts=True, limit=10)
        assert [b.source.id for b in back] == [source.id]


def test_a_hubs_newest_backlinks_and_how_many_there_are(db):
    hub = create(db, title="Hub", date="2024-01-01")
    older = create(db, title="Older", date="2024-02-01", body="[[Hub]] once, [[Hub]] twice")
    newer = create(db, title="Newer", date="2024-03-01", body="[[Hub]] and [[2024-01-01]]")
    draft = create(db, title="Draft", date="2024-04-01", body="[[Hub]]", status="draft")
    with db.read() as session:
        def newest(shown, drafts):
            found, total = browse.newest_backlinks(session, hub, shown, include_drafts=drafts)
            return [b.id for b in found], total

        assert newest(10, True) == ([draft.id, newer.id, older.id], 3)
        assert newest(2, True) == ([draft.id, newer.id], 3)
        assert newest(1, False) == ([newer.id], 2)  # a viewer counts no draft either
        assert newest(2, False) == ([newer.id, older.id], 2)
        # each source once, with its first link's context, as browse.backlinks pages them
        found, _ = browse.newest_backlinks(session, hub, 10, include_drafts=True)
        assert [(b.id, b.context) for b in found] == [
            (b.source.id, b.context) for offset in range(3)
            for b in browse.backlinks(session, hub, include_drafts=True, limit=1,
                                      offset=offset)[0]]


def test_renaming_a_target_turns_links_to_it_missing(db):
    create(db, title="Source", body="[[Target]]")
    target = create(db, title="Target", date="2024-03-28")
    with db.write() as session:
        entries.update(session, entries.get(session, target.id), {"title": "Renamed"},
                       base_revision=1, author="x")
    with db.read() as session:
        source = session.scalar(sa.select(Entry).where(Entry.title == "Source"))
        assert "wikilink missing" in source.body_html


def test_tags_come_from_the_field_and_from_hashtags(db):
    create(db, tags="GPU, #ml", body="about #zero-bubble pipelines")
    with db.read() as session:
        assert dict(browse.tag_counts(session)) == {"gpu": 1, "ml": 1, "zero-bubble": 1}
        items, total = browse.tagged(session, "zero-bubble")
        assert [e.title for e in items] == ["Parallelism"] and total == 1


def test_a_tag_page_is_the_same_whichever_plan_finds_it(db, monkeypatch):
    """browse.tagged walks the entries newest first for a common tag and sorts a rare
    tag's rows: both plans, on pages of every size, give what a plain sort gives."""
    with db.write() as session:
        for d in range(1, 25):
            entries.create(session, author="x", date=f"2024-01-{d:02d}", title=f"Day {d}",
                           tags=["all"] + (["some"] if d % 8 == 1 else []))
    expected = {"all": [f"Day {d}" for d in range(24, 0, -1)],
                "some": [f"Day {d}" for d in (17, 9, 1)]}
    for sorted_row in (0, 10**6):  # never walk, always walk
        monkeypatch.setattr(browse, "SORTED_ROW", sorted_row)
        with db.read() as session:
            for tag, titles in expected.items():
                for limit in (1, 2, 5, 50):
                    for offset in range(0, len(titles) + 1, limit):
                        items, total = browse.tagged(session, tag, limit=limit, offset=offset)
                        assert total == len(titles)
                        assert [e.title for e in items] == titles[offset:offset + limit]


def test_one_letter_per_week_from_the_editable_template(db):
    with db.write() as session:
        letters.set_letter_template(session, "## Notes\n\n## Experiments\n")
    with db.write() as session:
        letter, created = letters.ensure_letter(session, "2024-W13", "x")
        again, created_again = letters.ensure_letter(session, "2024-W13", "x")
    assert created and not created_again and letter.id == again.id
    assert letter.kind == "week" and letter.date.isoformat() == "2024-03-25"
    assert letter.body_md == "## Notes\n\n## Experiments"
    with pytest.raises(sa.exc.IntegrityError), db.write() as session:
        session.add(Entry(kind="week", date=letter.date, iso_week="2024-W13", title="dup",
                          slug="dup", status="published"))


def test_a_letter_cannot_move_out_of_its_week(db):
    with db.write() as session:
        letter, _ = letters.ensure_letter(session, "2024-W13", "x")
    with pytest.raises(errors.Invalid), db.write() as session:
        entries.update(session, entries.get(session, letter.id), {"date": "2024-04-10"},
                       base_revision=1, author="x")


def test_slugs_are_unique_per_date(db):
    a = create(db, title="Same")
    b = create(db, title="Same")
    assert (a.slug, b.slug) == ("same", "same-2")


def test_delete_removes_entry_history_and_index(db):
    entry = create(db, body="findable words")
    with db.write() as session:
        entries.delete(session, entries.get(session, entry.id), base_revision=1)
    assert count(db, Revision) == 0
    with db.read() as session:
        assert session.execute(sa.text("SELECT count(*) FROM entry_fts")).scalar() == 0


def test_stale_delete_conflicts(db):
    entry = create(db)
    with pytest.raises(errors.Conflict), db.write() as session:
        entries.delete(session, entries.get(session, entry.id), base_revision=0)
