"""GET /api/v1/complete for Obsidian's link forms: a note's headings after `[[Title#`,
files after `![[`; drafts' headings and files only for owners."""

from __future__ import annotations

import io

import pytest

from app.notebook import attachments, entries
from tests.helpers import OWNER, VIEWER

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 32


@pytest.fixture
def notebook(served, data_dir):
    with served.db.write() as session:
        bubbles = entries.create(
            session, author=OWNER, date="2024-03-27", title="Pipeline bubbles",
            body="# Pipeline bubbles\n\n## Notes on *bubbles*\n\nx\n\n## Warm-up & drain\n\ny")
        secret = entries.create(session, author=OWNER, date="2024-03-28", title="Secret plan",
                                body="## Hidden heading", status="draft")
        for entry, name in ((bubbles, "Bubble chart.png"), (secret, "secret-diagram.png")):
            attachments.store(session, data_dir, entry, io.BytesIO(PNG), name)
    return served


def offered(served, login=OWNER, **args) -> list[tuple[str, str]]:
    response = served.as_user(login)("get", "/api/v1/complete", query_string=args)
    assert response.status_code == 200, response.text
    return [(item["insert"], item["kind"]) for item in response.get_json()["items"]]


def test_headings_of_the_named_note_after_a_hash(notebook):
    assert offered(notebook, kind="link", prefix="pipeline bubbles#") == [
        ("pipeline bubbles#Pipeline bubbles", "heading"),
        ("pipeline bubbles#Notes on bubbles", "heading"),
        ("pipeline bubbles#Warm-up & drain", "heading")]
    assert offered(notebook, kind="link", prefix="Pipeline bubbles#warm") == [
        ("Pipeline bubbles#Warm-up & drain", "heading")]
    assert offered(notebook, kind="link", prefix="Nowhere#x") == []


def test_drafts_headings_only_for_owners(notebook):
    assert offered(notebook, kind="link", prefix="Secret plan#") == [
        ("Secret plan#Hidden heading", "heading")]
    assert offered(notebook, VIEWER, kind="link", prefix="Secret plan#") == []


def test_embeds_offer_files_then_notes(notebook):
    assert offered(notebook, kind="embed", prefix="Bubble") == [
        ("Bubble-chart.png", "file"), ("Pipeline bubbles", "entry")]
    assert ("secret-diagram.png", "file") in offered(notebook, kind="embed", prefix="diagram")
    assert offered(notebook, VIEWER, kind="embed", prefix="diagram") == []


def test_an_unknown_kind_is_a_422(notebook):
    response = notebook.as_user(OWNER)("get", "/api/v1/complete",
                                       query_string={"kind": "files", "prefix": "x"})
    assert response.status_code == 422
