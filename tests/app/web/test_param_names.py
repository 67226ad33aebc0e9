"""A form that names a parameter the experiment does not have (a typo, a script, a stale
page) is refused, as the API refuses it, rather than run or saved with the default in its
place; the browser's own submissions, the schedule form's experiment switch among them,
never name one."""

from __future__ import annotations

from app.models import Run, RunEvent, Schedule
from tests.helpers import count, form_for, load, make_schedule, schedule_form


def test_the_run_form_refuses_a_parameter_the_experiment_has_not(client, db):
    data = {**form_for("data_parallel"), "param.stepz": "5"}
    response = client.post("/experiments/data_parallel/run", data=data)
    assert response.status_code == 422
    assert "param.stepz: not a parameter of data_parallel" in response.text
    assert count(db, Run) == 0 and count(db, RunEvent) == 0


def test_the_schedule_form_refuses_a_parameter_the_experiment_has_not(client, db):
    response = client.post("/schedules", data=schedule_form(**{"param.iterz": "3"}))
    assert response.status_code == 422
    assert "param.iterz: not a parameter of collectives" in response.text
    assert count(db, Schedule) == 0
    schedule_id = make_schedule(client)
    before = load(db, Schedule, schedule_id)
    response = client.post(f"/schedules/{schedule_id}",
                           data=schedule_form(name="Renamed", **{"param.iterz": "3"}))
    assert response.status_code == 422 and "param.iterz" in response.text
    after = load(db, Schedule, schedule_id)
    assert (after.name, after.params, after.updated_at) == (before.name, before.params,
                                                            before.updated_at)
    # switching experiments sends the old one's parameters: shown, not refused
    response = client.post(f"/schedules/{schedule_id}",
                           data=schedule_form(experiment="gpt_mfu", params_for="collectives"))
    assert response.status_code == 200 and "Review them, then save" in response.text
