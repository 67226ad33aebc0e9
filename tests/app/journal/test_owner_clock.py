"""One clock for the owner: a card shows when its run finished in the notebook's time zone
(letter, page and feed alike), and the run list's week: filter means the owner's week."""

import datetime as dt

from app.journal import runs
from app.journal.views import cards
from app.models import Run
from tests.helpers import SMALL, load


def a_run(db, finished: dt.datetime) -> int:
    with db.write() as session:
        run = runs.create(session, "data_parallel", SMALL, actor="t")
        run.status, run.finished_at = "SUCCEEDED", finished
        run.created_at = finished
        return run.id


def test_cards_show_the_owners_clock(make_app):
    app = make_app(TIMEZONE="Europe/Berlin")
    db = app.extensions["db"]
    run_id = a_run(db, dt.datetime(2024, 3, 27, 22, 30))  # UTC
    card = cards.card(load(db, Run, run_id), "Europe/Berlin")
    assert "2024-03-27 23:30 CET" in card and "UTC" not in card
    client = app.test_client()
    body = client.post("/api/v1/entries", json={"title": "E", "body": f"```run\nid: {run_id}\n```"})
    assert "2024-03-27 23:30 CET" in body.get_json()["html"]  # the embed, as stored


def test_the_week_filter_is_the_owners_week(make_app):
    app = make_app(TIMEZONE="Pacific/Auckland")  # UTC+13 in March
    db = app.extensions["db"]
    # Sunday 2024-03-31 20:00 UTC is Monday 09:00 in Auckland: week 14 there, 13 in UTC
    late = a_run(db, dt.datetime(2024, 3, 31, 20, 0))
    client = app.test_client()
    in_w14 = [r["id"] for r in client.get("/api/v1/runs?week=2024-W14").get_json()["runs"]]
    in_w13 = [r["id"] for r in client.get("/api/v1/runs?week=2024-W13").get_json()["runs"]]
    assert late in in_w14 and late not in in_w13
    page = client.get("/runs?week=2024-W14").text
    assert f"/runs/{late}" in page
