"""Schedules through the JSON API and the firing rule: cron and time-zone validation, the
next fires in the schedule's own zone, missed fires coalesced within the grace period and
dropped after it, never a double fire, a visible skip while the last run is unfinished, and
a cap on the runs all schedules together start in one minute."""

import datetime as dt

import pytest
import sqlalchemy as sa

from app.config import from_environment
from app.journal import schedules
from app.journal.scheduler import Scheduler
from app.models import Entry, Run, Schedule
from app.notebook.isoweeks import iso_week, today
from tests.helpers import count


def new_schedule(client, **extra):
    body = {"experiment": "collectives", "cron": "0 2 * * *", "timezone": "UTC", **extra}
    r = client.post("/api/v1/schedules", json=body)
    assert r.status_code == 201, r.get_json()
    return r.get_json()


def fire(db, schedule_id, now):
    with db.write() as session:
        return schedules.fire_due(session, session.get(Schedule, schedule_id), now)


def utc(*args):
    return dt.datetime(*args, tzinfo=dt.UTC)


@pytest.mark.parametrize("body, field", [
    ({"cron": "61 * * * *"}, "cron"), ({"cron": "* * *"}, "cron"), ({"cron": ""}, "cron"),
    ({"cron": "0 2 31 2 *"}, "cron"), ({"cron": "0 2 * * funday"}, "cron"),
    ({"timezone": "Mars/Olympus"}, "timezone"), ({"experiment": "nope"}, "experiment"),
    ({"timezone": "posixrules"}, "timezone"), ({"timezone": "Factory"}, "timezone"),
    ({"timezone": "localtime"}, "timezone"), ({"timezone": 3}, "timezone"),
    ({"params": {"world_size": 100}}, "world_size"), ({"enabled": "yes"}, "enabled"),
    ({"misfire_grace_s": -1}, "misfire_grace_s"), ({"colour": "red"}, "colour"),
    ({"name": "nightly \udc00"}, None),
])
def test_bad_schedules_are_refused(client, db, body, field):
    base = {"experiment": "collectives", "cron": "0 2 * * *", "timezone": "UTC"}
    r = client.post("/api/v1/schedules", json={**base, **body})
    assert r.status_code == 422 and r.get_json()["error"].get("field") == field
    assert count(db, Schedule) == 0
    s = new_schedule(client)
    r = client.put(f"/api/v1/schedules/{s['id']}", json=body)
    assert r.status_code == 422
    assert client.get(f"/api/v1/schedules/{s['id']}").get_json()["cron"] == "0 2 * * *"


@pytest.mark.parametrize("cron, message", [
    ("61 * * * *", "cron's minute field '61': the last value (61) is higher than the maximum "
                   "value (59)"),
    ("0 25 * * *", "cron's hour field '25': "),
    ("0 2 32 * *", "cron's day-of-month field '32': "),
    ("0 2 * 13 *", "cron's month field '13': "),
])
def test_a_bad_cron_field_is_named(client, db, cron, message):
    r = client.post("/api/v1/schedules",
                    json={"experiment": "collectives", "cron": cron, "timezone": "UTC"})
    assert r.status_code == 422 and r.get_json()["error"]["message"].startswith(message)
    assert count(db, Schedule) == 0


def test_schedule_shows_next_fires_in_its_zone(client):
    s = new_schedule(client, cron="0 2 * * sun", timezone="Europe/Berlin")
    assert len(s["next_fires"]) == 5
    assert all(t.endswith("+01:00") or t.endswith("+02:00") for t in s["next_fires_local"])
    assert all("T02:00:00" in t for t in s["next_fires_local"])


def test_fires_coalesce_within_grace_and_never_double(client, db):
    s = new_schedule(client, cron="0 * * * *", misfire_grace_s=3 * 3600)
    with db.write() as session:
        session.get(Schedule, s["id"]).created_at = dt.datetime(2026, 1, 1, 0, 30)
    # down from 00:30 to 03:10: fires at 01:00, 02:00 and 03:00 were missed → one run, at 03:00
    run = fire(db, s["id"], utc(2026, 1, 1, 3, 10))
    assert run is not None and run.scheduled_for == dt.datetime(2026, 1, 1, 3, 0)
    assert fire(db, s["id"], utc(2026, 1, 1, 3, 20)) is None  # the same fire: nothing new
    assert count(db, Run) == 1
    # a second scheduler by mistake, with a stale view of last_fired_at: the unique key holds
    with db.write() as session:
        session.get(Schedule, s["id"]).last_fired_at = dt.datetime(2026, 1, 1, 2, 0)
    assert fire(db, s["id"], utc(2026, 1, 1, 3, 30)) is None
    assert count(db, Run) == 1


def test_fires_older_than_grace_are_dropped(client, db):
    s = new_schedule(client, cron="0 2 * * *", misfire_grace_s=3600)
    with db.write() as session:
        session.get(Schedule, s["id"]).created_at = dt.datetime(2026, 1, 1, 0, 0)
    assert fire(db, s["id"], utc(2026, 1, 1, 5, 0)) is None  # 02:00 is three hours late
    assert count(db, Run) == 0
    assert fire(db, s["id"], utc(2026, 1, 2, 2, 0, 30)).scheduled_for == dt.datetime(2026, 1, 2, 2)


def test_fire_while_previous_unfinished_is_a_visible_skip(client, db):
    s = new_schedule(client, cron="0 * * * *")
    with db.write() as session:
        session.get(Schedule, s["id"]).created_at = dt.datetime(2026, 1, 1, 0, 30)
    first = fire(db, s["id"], utc(2026, 1, 1, 1, 0, 5))
    second = fire(db, s["id"], utc(2026, 1, 1, 2, 0, 5))
    assert first.status == "QUEUED" and second.status == "SKIPPED"
    assert f"run {first.id}" in second.reason
    listed = client.get(f"/api/v1/runs?schedule={s['id']}").get_json()["runs"]
    assert [r["status"] for r in listed] == ["SKIPPED", "QUEUED"]


def test_disabled_schedules_do_not_fire(client, db):
    s = new_schedule(client, cron="*/10 * * * *")
    client.put(f"/api/v1/schedules/{s['id']}", json={"enabled": False})
    assert fire(db, s["id"], utc(2030, 1, 1)) is None


@pytest.mark.parametrize("phrase, cron", [
    ("every Sunday 02:00", "0 2 * * 0"), ("weekdays at 9", "0 9 * * 1-5"),
    ("every 6 hours", "0 */6 * * *"), ("every day at 7:30", "30 7 * * *"),
    ("sundays at 2am", "0 2 * * 7"), ("on mon, wed and fri at 18:00", "0 18 * * 1,3,5"),
    ("weekends at 10", "0 10 * * 6,0"), ("every month on the 1st at 03:00", "0 3 1 * *"),
    ("every 15 minutes", "*/15 * * * *"), ("hourly", "0 * * * *"),
])
def test_a_phrase_makes_the_same_schedule_as_its_cron(client, phrase, cron):
    in_words = new_schedule(client, cron=phrase, timezone="Europe/Berlin")
    in_cron = new_schedule(client, cron=cron, timezone="Europe/Berlin")
    assert in_words["next_fires"] == in_cron["next_fires"]


def test_crontab_day_numbers_mean_what_crontab_says():
    # APScheduler counts day-of-week 0 as Monday; a crontab line means Sunday by 0 and 7.
    after = dt.datetime(2026, 11, 30, tzinfo=dt.UTC)  # a Monday
    days = {cron: {t.strftime("%a") for t in schedules.next_fires(cron, "UTC", 7, after)}
            for cron in ("0 2 * * 0", "0 2 * * 7", "0 2 * * 1-5", "0 2 * * */2", "0 2 * * 5-7")}
    assert days["0 2 * * 0"] == days["0 2 * * 7"] == {"Sun"}
    assert days["0 2 * * 1-5"] == {"Mon", "Tue", "Wed", "Thu", "Fri"}
    assert days["0 2 * * */2"] == {"Sun", "Tue", "Thu", "Sat"}
    assert days["0 2 * * 5-7"] == {"Fri", "Sat", "Sun"}


def test_two_day_fields_fire_on_either_as_in_crontab(client):
    # Crontab: with both day-of-month and day-of-week restricted, a day matching either.
    assert new_schedule(client, cron="0 9 1 * mon")["cron"] == "0 9 1 * mon"
    after = dt.datetime(2026, 11, 30, 12, tzinfo=dt.UTC)  # a Monday, past 09:00
    days = [t.strftime("%a %d") for t in schedules.next_fires("0 9 1 * mon", "UTC", 3, after)]
    assert days == ["Tue 01", "Mon 07", "Mon 14"]
    # Feb 29th or a Monday of February: the Mondays come long before a leap day's Monday.
    leap = schedules.next_fires("0 0 29 2 1", "UTC", 1, after)
    assert leap == [utc(2027, 2, 1)]
    # A day field starting with "*" restricts nothing in crontab's reading: both must match.
    days = {t.strftime("%a") for t in schedules.next_fires("0 2 */2 * 1", "UTC", 6, after)}
    assert days == {"Mon"}


@pytest.mark.parametrize("phrase", ["every blue moon", "every day at 25:00", "every 0 hours",
                                    "sundays at 13pm", "every month on the 32nd"])
def test_phrases_it_cannot_read_are_refused_and_say_what_it_can(client, db, phrase):
    r = client.post("/api/v1/schedules", json={"experiment": "collectives", "cron": phrase,
                                               "timezone": "UTC"})
    assert r.status_code == 422 and r.get_json()["error"]["field"] == "cron"
    assert count(db, Schedule) == 0


@pytest.mark.parametrize("cron, every", [
    ("* * * * *", "every 1 minute"), ("*/5 * * * *", "every 5 minutes"),
    ("0,1 12 * * *", "every 1 minute"), ("0-4 * * * *", "every 1 minute"),
    ("every 5 minutes", "every 5 minutes"),
])
def test_a_schedule_fires_at_most_every_ten_minutes(client, db, cron, every):
    r = client.post("/api/v1/schedules", json={"experiment": "collectives", "cron": cron,
                                               "timezone": "UTC"})
    assert r.status_code == 422
    error = r.get_json()["error"]
    assert error["field"] == "cron" and every in error["message"]
    assert "at most every 10 minutes" in error["message"]
    assert client.get("/api/v1/schedules").get_json()["schedules"] == []
    ok = new_schedule(client, cron="*/10 * * * *")
    assert client.put(f"/api/v1/schedules/{ok['id']}", json={"cron": "* * * * *"}) \
        .status_code == 422


# -- all schedules together ----------------------------------------------------------------


def test_the_forms_preview_refuses_what_a_save_refuses(client):
    # Shown as one types: a line the save would refuse is said to be refused there.
    for cron in ("every minute", "*/5 * * * *", "0 2 31 2 *"):
        preview = client.get("/api/v1/schedules/preview", query_string={"cron": cron})
        saved = client.post("/api/v1/schedules", json={"experiment": "collectives",
                                                       "cron": cron, "timezone": "UTC"})
        assert preview.status_code == saved.status_code == 422, cron
        assert preview.get_json()["error"] == saved.get_json()["error"]
    ok = client.get("/api/v1/schedules/preview", query_string={"cron": "every 10 minutes"})
    assert ok.status_code == 200 and len(ok.get_json()["next_fires"]) == 5


def test_schedules_together_start_at_most_the_cap_a_minute_and_skip_the_rest(client, db):
    """Each `*/10` schedule is allowed alone; six on the same minute with a cap of four: four
    runs, two visible skips (which do not count), and the next minute starts afresh."""
    made = [new_schedule(client, cron="*/10 * * * *") for _ in range(6)]
    with db.write() as session:
        for s in made:
            session.get(Schedule, s["id"]).created_at = dt.datetime(2026, 1, 1, 0, 0)
    fired = []
    for s in made:
        with db.write() as session:
            run = schedules.fire_due(session, session.get(Schedule, s["id"]),
                                     utc(2026, 1, 1, 0, 10, 5), per_minute=4)
            fired.append((run.status, run.reason_code, run.reason))
    assert [f[0] for f in fired] == ["QUEUED"] * 4 + ["SKIPPED"] * 2
    assert {f[1] for f in fired[4:]} == {"too_many_scheduled_runs"}
    assert "already started 4 runs this minute" in fired[4][2]
    assert "COMMONPLACE_SCHEDULED_RUNS_PER_MINUTE" in fired[4][2]
    shown = client.get(f"/api/v1/runs?schedule={made[5]['id']}").get_json()["runs"]
    assert [(r["status"], r["reason_code"]) for r in shown] == [
        ("SKIPPED", "too_many_scheduled_runs")]
    with db.write() as session:  # the skipped schedule's next fire is a new minute
        run = schedules.fire_due(session, session.get(Schedule, made[5]["id"]),
                                 utc(2026, 1, 1, 0, 20, 5), per_minute=4)
        assert run.status == "QUEUED"


def test_the_scheduler_process_keeps_the_configured_cap(make_app):
    app = make_app(SCHEDULED_RUNS_PER_MINUTE=2)
    past = dt.datetime.now(dt.UTC) - dt.timedelta(hours=2)  # a fire two hours ago, daily
    with app.extensions["db"].write() as session:
        for _ in range(3):
            schedules.create(session, {"experiment": "collectives",
                                       "cron": f"{past.minute} {past.hour} * * *"})
        for schedule in session.scalars(sa.select(Schedule)):
            schedule.created_at = (past - dt.timedelta(hours=1)).replace(tzinfo=None)
    Scheduler(app).fire()
    with app.extensions["db"].read() as session:
        statuses = sorted(session.scalars(sa.select(Run.status)))
    assert statuses == ["QUEUED", "QUEUED", "SKIPPED"]


@pytest.mark.parametrize("value", ["0", "-3", "many"])
def test_a_bad_cap_stops_the_process_with_its_name(value):
    with pytest.raises(SystemExit, match="COMMONPLACE_SCHEDULED_RUNS_PER_MINUTE"):
        from_environment({"COMMONPLACE_SCHEDULED_RUNS_PER_MINUTE": value})


def test_the_scheduler_makes_this_weeks_letter_once(make_app):
    """The weekly job (and start-up) asks whether the letter exists before it loads the
    notebook's saving: made when missing, left alone when there."""
    app = make_app()
    week = iso_week(today(app.config["TIMEZONE"]))
    letters = sa.select(sa.func.count()).select_from(Entry).where(Entry.kind == "week",
                                                                  Entry.iso_week == week)
    with app.extensions["db"].read() as session:
        assert session.scalar(letters) == 0
    Scheduler(app).letter()
    Scheduler(app).letter()
    with app.extensions["db"].read() as session:
        assert session.scalar(letters) == 1
