"""Pages kept between views (app/web/pages/kept.py): home, the letter, the site map and tag
pages are answered from the last rendering while nothing changed, and never once anything
did - a save through the web, a write by another process, another reader, another URL,
another day."""

from __future__ import annotations

import contextlib
import sqlite3

import sqlalchemy as sa

from app.notebook import transfer
from tests.helpers import (
    OLD_ENTRY,
    OWNER,
    VIEWER,
    add_token,
    at_revision,
    bearer,
    create_entry,
    edit_entry,
    entry_form,
    make_schedule,
    queue,
)

KEPT = ("/", "/weeks/2024-W13", "/sitemap?year=2024", "/tags/gpu")


def test_a_kept_page_is_answered_again_until_the_notebook_changes(client, db):
    entry_id = create_entry(client, title="First title")
    first = {path: client.get(path).text for path in KEPT}
    for path in KEPT:
        assert "First title" in first[path], path
        assert client.get(path).text == first[path], path  # kept: the very same page
    assert edit_entry(client, entry_id, 1, title="Second title").status_code == 303
    for path in KEPT:
        page = client.get(path).text
        assert "Second title" in page and "First title" not in page, path


def test_a_write_by_another_process_shows_on_the_next_view(client, db):
    """The CLI, an import or the scheduler write through connections of their own: the
    triggers on `entry` move the notebook's version whoever writes."""
    entry_id = create_entry(client, title="Before")
    for path in KEPT:
        assert "Before" in client.get(path).text
    path = db.sqlite_path
    with sqlite3.connect(path) as other:  # not the app's pool: as another process writes
        other.execute("UPDATE entry SET title = 'After' WHERE id = ?", (entry_id,))
    for path in KEPT:
        page = client.get(path).text
        assert "After" in page and "Before" not in page, path


def test_each_reader_and_each_url_has_its_own_page(served):
    owner, viewer = served.as_user(OWNER), served.as_user(VIEWER)
    owner("post", "/entries/new", data=entry_form(title="Secret plan", status="draft"))
    owner("post", "/entries/new", data=entry_form(title="Public note"))
    for path in KEPT:  # the owner first, so a kept page would be the owner's
        assert "Secret plan" in owner("get", path).text, path
        page = viewer("get", path).text
        assert "Public note" in page and "Secret plan" not in page, path
        assert "Secret plan" in owner("get", path).text, path
    for n in range(60):
        owner("post", "/entries/new", data=entry_form(title=f"Note {n:02}"))
    newest, older = owner("get", "/tags/gpu").text, owner("get", "/tags/gpu?offset=50").text
    assert "Note 59" in newest and "Note 59" not in older and "Public note" in older


def test_a_new_day_renders_afresh(make_app):
    """The key holds the owner's day: the same instant is a different date on either side
    of the date line, and home offers to save for that date."""
    app = make_app(TIMEZONE="Pacific/Kiritimati")  # UTC+14
    client = app.test_client()
    east = client.get("/").text
    app.config["TIMEZONE"] = "Pacific/Pago_Pago"  # UTC-11: always another date
    west = client.get("/").text
    assert east != west
    assert east.split("Save for ")[1][:20] != west.split("Save for ")[1][:20]


def test_a_missing_page_and_a_bad_request_are_not_kept(client):
    assert client.get("/tags/nothing-here").status_code == 404
    create_entry(client, tags="nothing-here")
    assert client.get("/tags/nothing-here").status_code == 200
    assert client.get("/sitemap?year=20x4").status_code == 400
    assert client.get("/weeks/2024-W99").status_code == 404


# -- the notebook's version: what moves it, and what does not --------------------------------


def notebook_version(db) -> int:
    with sqlite3.connect(db.sqlite_path) as conn:
        return conn.execute("SELECT n FROM notebook_version").fetchone()[0]


@contextlib.contextmanager
def selects(db):
    """Counts the SELECTs every connection of the app sends from here on (pages' prepared
    statements go straight to sqlite3, so its trace callback, not SQLAlchemy's events)."""
    sent = [0]

    def trace(sql: str) -> None:
        if sql.split(None, 1)[0].upper() == "SELECT":
            sent[0] += 1

    def counted(dbapi_conn, _record) -> None:
        dbapi_conn.set_trace_callback(trace)

    sa.event.listen(db.engine, "connect", counted)
    db.engine.dispose()  # every connection from now on counts
    try:
        yield sent
    finally:
        sa.event.remove(db.engine, "connect", counted)
        db.engine.dispose()


def journal_writes(app, db, client) -> None:
    """What `commonplace up` does all day without touching the notebook: its local runner
    registers and long-polls (each attempt stamps runner.last_seen_at), a run is queued,
    a script's token is stamped with its last use, a schedule is made."""
    runner = bearer(add_token(db, "local", "runner"))
    assert client.post("/api/v1/runner/register", json={"labels": {}},
                       headers=runner).status_code == 200
    assert client.post("/api/v1/runner/lease", json={"wait": 0},
                       headers=runner).status_code in (200, 204)
    queue(db, "collectives")
    script = bearer(add_token(db, "script", "owner"))
    assert client.get("/api/v1/tags", headers=script).status_code == 200
    make_schedule(client)


def test_journal_writes_leave_kept_pages_kept(app, client, db):
    """A runner's poll, a run, a token's use and a schedule are commits to the database
    but not to the notebook: every kept page is answered again with one SELECT (the
    notebook's version), the site map and tags without recounting anything, on
    connections that never rendered them. The next save shows at once."""
    entry_id = create_entry(client, title="Kept title")
    for path in KEPT:
        client.get(path)  # home's first view this week makes the letter: kept from the next
        client.get(path)
    before = notebook_version(db)
    journal_writes(app, db, client)
    assert notebook_version(db) == before
    with selects(db) as sent:  # every connection new: the pages are the process's
        for path in KEPT:
            assert "Kept title" in client.get(path).text, path
        assert sent[0] == len(KEPT)
        assert edit_entry(client, entry_id, 1, title="Saved title").status_code == 303
        sent[0] = 0
        for path in KEPT:
            page = client.get(path).text
            assert "Saved title" in page and "Kept title" not in page, path
        assert sent[0] > 2 * len(KEPT)  # rendered afresh


def test_every_notebook_write_moves_its_version(app, client, db, tmp_path):
    seen = [notebook_version(db)]

    def moved() -> bool:
        seen.append(notebook_version(db))
        return seen[-1] > seen[-2]

    entry_id = create_entry(client, title="Target", body="- [ ] a task")
    assert moved()
    assert edit_entry(client, entry_id, 1, tags="gpu other", body="- [ ] a task").status_code == 303
    assert moved()
    assert client.post(f"/entries/{entry_id}/tasks/0", data={"done": "1",
                       "base_revision": "2"}).status_code in (200, 303)
    assert moved()
    linker = create_entry(client, title="Linker", body="See [[Later]].")
    assert moved()
    later = create_entry(client, title="Later")  # re-renders Linker's link in the same save
    assert moved()
    assert client.post("/weeks/2024-W20/letter").status_code in (200, 303)
    assert moved()
    with sqlite3.connect(db.sqlite_path) as other:  # another process
        other.execute("UPDATE entry SET title = 'Renamed' WHERE id = ?", (linker,))
    assert moved()
    notes = tmp_path / "in"
    notes.mkdir()
    (notes / "imported.md").write_text("---\ntitle: Imported\ndate: 2024-05-01\n---\nText\n")
    transfer.import_folder(db, notes)
    assert moved()
    assert client.post(f"/entries/{later}/delete",
                       data={"base_revision": "1"}).status_code == 303
    assert moved()
    journal_writes(app, db, client)
    assert not moved()


def test_migration_0009_counts_from_an_existing_notebook_and_goes_away_down(tmp_path):
    from alembic import command

    from app import upgrades

    db, migrate = at_revision(tmp_path, "0008")

    def names() -> set[str]:
        with sqlite3.connect(db.sqlite_path) as conn:
            return {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}

    with sqlite3.connect(db.sqlite_path) as conn:  # a notebook as 0008 left it
        conn.execute(OLD_ENTRY, (1, "published"))
    assert upgrades.pending_migrations(db)[-4:] == ["0012", "0011", "0010", "0009"]
    upgrades.upgrade(db, tmp_path / "backups")
    upgraded = notebook_version(db)  # 0012 keyed the entry's title: one change
    assert upgraded == 1
    with sqlite3.connect(db.sqlite_path) as conn:
        conn.execute("UPDATE entry SET title = 'New' WHERE id = 1")
        conn.execute("DELETE FROM entry WHERE id = 1")
    assert notebook_version(db) == upgraded + 2
    migrate(command.downgrade, "0008")
    assert not {n for n in names() if n.startswith("notebook_version")}
