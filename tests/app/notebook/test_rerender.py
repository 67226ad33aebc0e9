"""Stored HTML follows the renderer: after an upgrade that changes how notes render (such
as numbering task boxes so they can be ticked from the page), every note is rendered again
once, and its text and history stay as they were."""

from click.testing import CliRunner

from app import cli
from app.models import Entry, Revision, Setting
from app.notebook import entries, render, rerender
from tests.helpers import count, load


def test_notes_saved_under_an_older_renderer_are_rendered_again_once(db):
    with db.write() as session:
        entry = entries.create(session, author="me", date="2024-03-01", title="Todo",
                               body="- [ ] write the letter\n- [x] run the sweep")
        entry_id = entry.id
        assert 'data-task="0"' in entry.body_html
    with db.write() as session:  # as an older renderer left it: no numbered boxes
        session.get(Entry, entry_id).body_html = "<p>old html</p>"
    assert rerender.stale(db)
    assert rerender.refresh_all(db) == 1
    entry = load(db, Entry, entry_id)
    assert 'data-task="0"' in entry.body_html and 'data-task="1"' in entry.body_html
    assert entry.revision == 1 and count(db, Revision) == 1  # not a revision
    assert load(db, Setting, "render_version").value == str(render.VERSION)
    assert not rerender.stale(db) and rerender.refresh_all(db) == 0


def test_db_upgrade_runs_it(data_dir, monkeypatch):
    monkeypatch.setenv("COMMONPLACE_DATA_DIR", str(data_dir))
    monkeypatch.delenv("COMMONPLACE_DATABASE_URL", raising=False)
    result = CliRunner().invoke(cli.main, ["db", "upgrade"])
    assert result.exit_code == 0, result.output
    again = CliRunner().invoke(cli.main, ["db", "upgrade"])
    assert "rendered" not in again.output
