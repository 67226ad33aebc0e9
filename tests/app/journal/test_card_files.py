"""A run card in the letter's file on disk: the mirror and an export hold its key numbers,
its sentences and its block id after the ```run block, its chart as an SVG file beside
the notes; the page still renders the live card, and reading the file back (an import)
gives the block alone. In an export, the runs a card or a week's changes name link the
file that holds their card, never the app's pages."""

from __future__ import annotations

import posixpath
import re
from urllib.parse import unquote

import sqlalchemy as sa

from app.journal import posting
from app.journal.views import card_trend, cards
from app.models import Entry, Run
from app.notebook import mirror, render, transfer, vault
from tests.app.journal.test_posting import finished_run
from tests.app.journal.test_trends import SMALL, collectives_result, finished
from tests.app.journal.test_week_changes import history
from tests.helpers import THIS_WEEK


def test_a_letters_file_holds_its_cards_numbers_and_imports_back_as_the_block(
        client, db, data_dir, tmp_path, make_app):
    run_id = finished_run(db)
    assert posting.post_cards(db, "UTC") == [run_id]
    mirrored = (data_dir / "notes" / "2024" / "2024-W13.md").read_text()
    block = f"```run\nid: {run_id}\n```"
    after = mirrored[mirrored.index(block) + len(block):]
    shown = after[:after.index("<!-- commonplace:run end -->")]
    assert f"**Run {run_id} · " in shown and "** SUCCEEDED" in shown
    caption = next(line for line in shown.splitlines() if line.startswith("**Run"))
    assert caption.endswith(f" ^run-{run_id}")  # Obsidian's block id, which links reach
    assert "](/" not in shown  # no link to the app's pages, dead in a vault
    assert "| strategy | ok | step | meas/pred | tokens/s |" in shown
    assert "| ddp | ✓ | 20 ms | 2.00× | 1 k |" in shown
    assert "ddp took 20 ms against 10 ms predicted (2.00×)." in shown
    assert f"![run-{run_id}.svg](../run-cards/run-{run_id}.svg)" in shown
    chart = data_dir / "notes" / "run-cards" / f"run-{run_id}.svg"
    assert "<svg" in chart.read_text()
    # the page still shows the live card, not the markdown
    letter = client.get("/api/v1/weeks/2024-W13").get_json()["letter"]
    assert 'class="run-card run-succeeded"' in letter["html"]
    assert "commonplace:run" not in letter["body"] and "| strategy |" not in letter["body"]
    # the export holds the same, and an import of it keeps the block and no chart file
    out = tmp_path / "out"
    vault.export_vault(db, out)
    exported = (out / "2024-W13.md").read_text()
    assert "| strategy | ok |" in exported
    assert (out / "run-cards" / f"run-{run_id}.svg").exists()
    back = make_app(DATA_DIR=tmp_path / "back",
                    DATABASE_URL=f"sqlite:///{tmp_path / 'back'}/commonplace.db")
    report = transfer.import_folder(back.extensions["db"], out, workers=0)
    assert report.errors == [] and report.attachments == {}
    assert [s for s in report.skipped if f"run-{run_id}.svg: a run card's chart" in s]
    with back.extensions["db"].read() as session:
        body = session.scalar(sa.select(Entry.body_md).where(Entry.kind == "week"))
    assert body == letter["body"]


def test_a_run_block_in_a_list_item_is_the_card_on_the_page_and_its_numbers_in_the_files(
        client, db, data_dir, tmp_path):
    run_id = finished_run(db)
    body = (f"- the sweep, as it came back:\n  ```run\n  id: {run_id}\n  ```\n- and after it\n\n"
            f"> ```run\n> id: {run_id}\n> ```")
    made = client.post("/api/v1/entries", json={"date": "2024-03-27", "title": "Sweep",
                                                "body": body}).get_json()
    html = made["html"]
    # the card in the item, and in the quote, where the code block was
    assert html.count('class="run-card run-succeeded"') == 2 and "id: " not in html
    assert html.index("the sweep") < html.index("run-card") < html.index("and after it")
    with db.read() as session:
        entry = session.get(Entry, made["id"])
        assert run_id in cards.embedded_runs(entry.body_md)
    mirrored = (data_dir / "notes" / "2024" / "2024-03-27-sweep.md").read_text()
    block = f"  ```run\n  id: {run_id}\n  ```\n"
    after = mirrored[mirrored.index(block) + len(block):]
    shown, rest = after.split("  <!-- commonplace:run end -->\n", 1)
    assert shown.startswith("  <!-- commonplace:run shown -->\n")
    # indented as the item's text, so it stays in the item (and the list goes on after it)
    assert all(line.startswith("  ") for line in shown.splitlines() if line)
    assert "  | ddp | ✓ | 20 ms | 2.00× | 1 k |" in shown
    assert f"  ![run-{run_id}.svg](../run-cards/run-{run_id}.svg)" in shown
    assert rest.startswith("- and after it")
    shown_html = render.render(mirrored.split("---\n", 2)[2]).html
    assert shown_html.count("<ul>") == 1 and "<table>" in shown_html
    # an export holds the same; its file read back is the body as written
    out = tmp_path / "out"
    vault.export_vault(db, out)
    exported = (out / "Sweep.md").read_text()
    assert "  | ddp | ✓ | 20 ms | 2.00× | 1 k |" in exported
    assert mirror.parse_file(out / "Sweep.md").body.rstrip("\n") == body
    report = transfer.import_folder(db, out, workers=0)
    assert (report.created, report.updated, report.errors) == (0, 0, [])


def test_an_exports_runs_link_the_files_holding_their_cards_and_import_back_unchanged(
        db, data_dir, tmp_path):
    """Last weeks' runs in their letters, this week's in its own with the changes block:
    every link the export writes reaches a file of the folder, at the block id it names."""
    before = history(db)
    slow = finished(db, "collectives", SMALL, collectives_result(30e9))
    latest = finished(db, "collectives", SMALL, collectives_result(30.2e9))
    posting.post_cards(db, "UTC")
    out = tmp_path / "out"
    vault.export_vault(db, out)
    texts = {p.relative_to(out).as_posix(): p.read_text() for p in out.rglob("*.md")}
    links = [(name, target) for name, text in texts.items()
             for target in re.findall(r"\]\(([^)\s]+)\)", text)]
    assert links and not [t for _, t in links if t.startswith("/")]  # none to the app
    for name, target in links:
        path, _, block = target.partition("#")
        there = posixpath.normpath(posixpath.join(posixpath.dirname(name), unquote(path)))
        assert (out / there).is_file(), (name, target)
        if block:
            assert f" {block}\n" in texts[there], (name, target)
    letter = texts[f"{THIS_WEEK}.md"]
    opening = letter[letter.index("<!-- commonplace:changes shown -->"):]
    assert (f"[#{slow}]({THIS_WEEK}.md#^run-{slow}), [#{latest}]({THIS_WEEK}.md#^run-"
            f"{latest})" in opening)
    # the first card of the week names the run before it, in last week's letter
    with db.read() as session:
        last_week = card_trend.week_of(session.get(Run, before[-1]), "UTC")
    assert f"([#{before[-1]}]({last_week}.md#^run-{before[-1]}))" in letter
    # a mirror's file is written alone: it links the cards it holds, names the others
    for mirrored in (data_dir / "notes").rglob("*.md"):
        assert "](/runs/" not in mirrored.read_text() and "](/trends/" not in mirrored.read_text()
    mirrored = (data_dir / "notes" / THIS_WEEK[:4] / f"{THIS_WEEK}.md").read_text()
    assert f"[#{slow}]({THIS_WEEK}.md#^run-{slow})" in mirrored
    assert f"(#{before[-1]})" in mirrored and f"[#{before[-1]}]" not in mirrored
    report = transfer.import_folder(db, out, workers=0)
    assert (report.created, report.updated, report.errors) == (0, 0, [])
