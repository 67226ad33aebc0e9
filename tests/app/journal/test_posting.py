"""A finished run's result card in the weekly letter (app.journal.posting), and the ```run
embed in any entry: posted once, never over the owner's concurrent edit, the final card
shown once the run finishes."""

import datetime as dt

import sqlalchemy as sa

from app.journal import posting, runs
from app.models import Entry, Run
from tests.helpers import SMALL


def finished_run(db, status="SUCCEEDED"):
    with db.write() as session:
        run = runs.create(session, "data_parallel", SMALL, actor="t")
        run.status, run.finished_at = status, dt.datetime(2024, 3, 27, 12)
        if status == "SUCCEEDED":
            run.result = {"strategies": [{"strategy": "ddp", "label": "DDP",
                                          "correctness": {"passed": True,
                                                          "max_grad_abs_error": 1e-9},
                                          "step_time_s": {"median": 0.02, "p10": 0.019,
                                                          "p90": 0.03},
                                          "prediction": {"step_time_s": 0.01,
                                                         "dominant": "comm",
                                                         "residual_s": 0.010,
                                                         "unmodelled": ["hooks"]},
                                          "ratios": {"step_time": 2.0},
                                          "memory": [{"rank": 0, "peak": {
                                              "measured": 950, "predicted": 1000,
                                              "ratio": 0.95}}],
                                          "tokens_per_s": 1000.0}]}
        return run.id


def test_finished_runs_land_in_the_experiments_section_of_their_week(client, db):
    run_id = finished_run(db)
    failed_id = finished_run(db, "FAILED")
    assert posting.post_cards(db, "UTC") == [run_id, failed_id]
    assert posting.post_cards(db, "UTC") == []  # once only
    letter = client.get("/api/v1/weeks/2024-W13")
    body = letter.get_json()["letter"]["body"]
    assert body.index("## Experiments") < body.index(f"id: {run_id}") < body.index("## Reading")
    html = letter.get_json()["letter"]["html"]
    assert 'class="run-card run-succeeded"' in html and "<svg" in html and "DDP" in html
    # the letter's card keeps the model's residual and the memory against its formula
    assert "+10 ms" in html and "not modelled: hooks" in html and "r0 950 B / 1 kB" in html
    assert "run-failed" in html
    revs = client.get(f"/api/v1/entries/{letter.get_json()['letter']['id']}/revisions")
    assert revs.get_json()["revisions"][0]["author"] == "scheduler"


def test_card_never_clobbers_the_owners_concurrent_edit(client, db):
    letter = client.get("/api/v1/weeks/2024-W13")
    assert letter.status_code == 404  # a past week: no letter yet
    run_id = finished_run(db)
    posting.post_cards(db, "UTC")
    entry = client.get("/api/v1/weeks/2024-W13").get_json()["letter"]
    # the owner opened the letter before the card arrived and saves from that stale base
    stale = client.put(f"/api/v1/entries/{entry['id']}", json={
        "body": "my words", "base_revision": entry["revision"] - 1})
    assert stale.status_code == 409 and f"id: {run_id}" in stale.get_json()["error"][
        "current"]["body"]
    # and the card is appended after the owner's fresh save
    client.put(f"/api/v1/entries/{entry['id']}", json={
        "body": entry["body"] + "\n\nnotes typed meanwhile", "base_revision": entry["revision"]})
    second = finished_run(db)
    posting.post_cards(db, "UTC")
    body = client.get("/api/v1/weeks/2024-W13").get_json()["letter"]["body"]
    assert "notes typed meanwhile" in body and f"id: {second}" in body


def test_run_embed_in_any_entry_and_bad_embeds(client, db):
    run_id = finished_run(db)
    r = client.post("/api/v1/entries", json={
        "title": "Look", "body": f"```run\nid: {run_id}\n```\n\n```run\nid: 999\n```\n\n"
                                 "```run\nnonsense\n```"})
    html = r.get_json()["html"]
    assert f'href="/runs/{run_id}"' in html
    assert "there is no run 999" in html and 'a run block needs a line' in html


def test_a_hand_written_embed_of_an_unfinished_run_shows_its_final_card(client, db):
    with db.write() as session:
        run = runs.create(session, "data_parallel", SMALL, actor="t")
    entry = client.post("/api/v1/entries", json={
        "title": "Watching", "body": f"Started this:\n\n```run\nid: {run.id}\n```"}).get_json()
    assert "run-queued" in entry["html"]
    with db.write() as session:
        finished = session.get(Run, run.id)
        finished.status, finished.finished_at = "FAILED", dt.datetime(2024, 3, 27, 12)
        finished.reason = "boom"
    posting.post_cards(db, "UTC")
    after = client.get(f"/api/v1/entries/{entry['id']}").get_json()
    assert "run-failed" in after["html"] and "boom" in after["html"]
    assert after["revision"] == entry["revision"]  # derived HTML, not a new revision


def test_runs_that_never_started_stay_out_of_the_letter(client, db):
    with db.write() as session:
        cancelled = runs.create(session, "data_parallel", SMALL, actor="t")
        runs.cancel(session, cancelled, actor="t")
        skipped = runs.create(session, "collectives", {}, actor="scheduler")
        runs.skip(session, skipped, reason="previous run unfinished")
        expired = runs.create(session, "collectives", {}, actor="t")
        runs.transition(session, expired, runs.EXPIRED, actor="reaper", reason="no runner")
        ids = cancelled.id, skipped.id, expired.id
    assert posting.post_cards(db, "UTC") == [ids[2]]  # an expired run is worth knowing about
    assert posting.post_card(db, ids[0], "UTC") is None
    with db.read() as session:
        letters = [e.body_md for e in session.scalars(sa.select(Entry))]
    assert any(f"id: {ids[2]}" in body for body in letters)
    assert not any(f"id: {ids[0]}" in body or f"id: {ids[1]}" in body for body in letters)
