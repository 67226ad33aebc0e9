"""The journal's schedule pages: create and edit with cron and time-zone validation next to
each field (nothing saved on bad input), the next fires in the schedule's own zone,
switching experiments, deleting, and skipped fires made visible."""

from __future__ import annotations

import datetime as dt
import re

import pytest

from app.journal import runs
from app.models import Run, Schedule
from tests.helpers import count, error_of, load, make_schedule, schedule_form
from tests.strict_pages import assert_strict_page


def test_create_a_schedule_and_see_its_next_fires(client, db):
    listing = client.get("/schedules")
    assert listing.status_code == 200
    assert_strict_page(listing)
    assert "param.world_size" in listing.text  # the generated form for the new schedule
    schedule_id = make_schedule(client, **{"param.iters": "3"})
    schedule = load(db, Schedule, schedule_id)
    assert (schedule.cron, schedule.timezone, schedule.enabled) == ("0 2 * * sun",
                                                                    "Europe/Berlin", True)
    assert schedule.misfire_grace_s == 6 * 3600 and schedule.params["iters"] == 3
    page = client.get(f"/schedules/{schedule_id}")
    assert page.status_code == 200
    assert_strict_page(page)
    fires = re.findall(r"<li><time datetime=\"[^\"]+\">(Sun \d{4}-\d\d-\d\d 02:00 CES?T)</time>",
                       page.text)
    assert len(fires) == 5  # the next five, in the schedule's own time zone
    assert "Sunday sweep" in client.get("/schedules").text


@pytest.mark.parametrize("cron,message", [
    ("61 * * * *", "higher than the maximum"),
    ("* * *", "five fields"),
    ("0 2 31 2 *", "never fires"),
    ("every blue moon", "five fields"),
    ("", "cron is required"),
])
def test_a_bad_cron_is_refused_next_to_the_field(client, db, cron, message):
    response = client.post("/schedules", data=schedule_form(cron=cron))
    assert response.status_code == 422
    assert message in error_of(response.text, "s-cron")
    assert f'value="{cron}"' in response.text
    assert count(db, Schedule) == 0
    schedule_id = make_schedule(client)
    before = load(db, Schedule, schedule_id)
    response = client.post(f"/schedules/{schedule_id}",
                           data=schedule_form(cron=cron, name="Renamed"))
    assert response.status_code == 422
    assert message in error_of(response.text, "s-cron")
    after = load(db, Schedule, schedule_id)
    assert (after.cron, after.name, after.updated_at) == (before.cron, before.name,
                                                          before.updated_at)


@pytest.mark.parametrize("fields,input_id,message", [
    ({"timezone": "Mars/Olympus"}, "s-timezone", "unknown time zone"),
    ({"timezone": "Factory"}, "s-timezone", "unknown time zone"),
    ({"timezone": "posixrules"}, "s-timezone", "unknown time zone"),
    ({"misfire_grace_hours": "soon"}, "s-grace", "number of hours"),
    ({"misfire_grace_hours": "1000"}, "s-grace", "0 to 168 hours"),
    ({"param.world_size": "1"}, "p-world_size", "at least 2 ranks"),
    ({"param.iters": "many"}, "p-iters", "whole number"),
    ({"experiment": "warp_drive"}, "s-experiment", "unknown experiment"),
])
def test_bad_schedule_fields_are_refused_next_to_the_field(client, db, fields, input_id,
                                                           message):
    response = client.post("/schedules", data=schedule_form(**fields))
    assert response.status_code == 422
    assert message in error_of(response.text, input_id)
    assert count(db, Schedule) == 0


def test_edit_a_schedule(client, db):
    schedule_id = make_schedule(client)
    response = client.post(f"/schedules/{schedule_id}", data=schedule_form(
        cron="30 6 * * mon-fri", timezone="UTC", enabled=None, name="Weekday sweep",
        misfire_grace_hours="1.5", **{"param.iters": "4"}))
    assert response.status_code == 303
    schedule = load(db, Schedule, schedule_id)
    assert (schedule.cron, schedule.timezone, schedule.enabled, schedule.name) == (
        "30 6 * * mon-fri", "UTC", False, "Weekday sweep")
    assert schedule.misfire_grace_s == 5400 and schedule.params["iters"] == 4
    page = client.get(response.location)
    assert "Saved." in page.text and "06:30 UTC" in page.text


def test_switching_the_experiment_shows_its_parameters_and_saves_nothing(client, db):
    schedule_id = make_schedule(client)
    response = client.post(f"/schedules/{schedule_id}",
                           data=schedule_form(experiment="gpt_mfu", params_for="collectives"))
    assert response.status_code == 200
    assert "Review them, then save" in response.text
    assert "param.peak_tflops" in response.text and "param.ops" not in response.text
    assert load(db, Schedule, schedule_id).experiment == "collectives"
    response = client.post(f"/schedules/{schedule_id}", data=schedule_form("gpt_mfu"))
    assert response.status_code == 303
    assert load(db, Schedule, schedule_id).experiment == "gpt_mfu"


def test_delete_a_schedule_keeps_its_runs(client, db):
    schedule_id = make_schedule(client)
    with db.write() as session:
        run = runs.create(session, "collectives", {}, actor="scheduler", trigger="schedule",
                          schedule_id=schedule_id, scheduled_for=dt.datetime(2025, 1, 5, 1))
        run_id = run.id
    confirm = client.get(f"/schedules/{schedule_id}/delete")
    assert confirm.status_code == 200 and "Delete" in confirm.text
    assert count(db, Schedule) == 1
    response = client.post(f"/schedules/{schedule_id}/delete")
    assert response.status_code == 303 and response.location == "/schedules"
    assert count(db, Schedule) == 0
    assert load(db, Run, run_id).schedule_id is None
    assert client.get(f"/schedules/{schedule_id}").status_code == 404


def test_skipped_fires_are_visible(client, db):
    schedule_id = make_schedule(client)
    with db.write() as session:
        first = runs.create(session, "collectives", {}, actor="scheduler", trigger="schedule",
                            schedule_id=schedule_id, scheduled_for=dt.datetime(2025, 1, 5, 1))
        second = runs.create(session, "collectives", {}, actor="scheduler", trigger="schedule",
                             schedule_id=schedule_id, scheduled_for=dt.datetime(2025, 1, 12, 1))
        runs.skip(session, second, reason=f"run {first.id} of this schedule is still unfinished")
        other = runs.create(session, "collectives", {}, actor="test")
        ids = first.id, second.id, other.id
    page = client.get(f"/schedules/{schedule_id}").text
    assert "skipped" in page and f"run {ids[0]} of this schedule is still unfinished" in page
    listed = client.get("/schedules").text
    assert "1 skipped" in listed and "past the 4 runs all schedules together" in listed
    listing = client.get(f"/runs?schedule={schedule_id}").text
    assert f'href="/runs/{ids[1]}"' in listing and "skipped" in listing
    assert f'href="/runs/{ids[2]}"' not in listing
    assert "Sunday sweep" in listing  # "Runs of “Sunday sweep”"

