"""The owner's own experiments through the app (test client, real SQLite, real files):
a folder read as the runner reads it, its declarations reported when a runner registers,
the catalogue (API and page), the form and the API refusing bad parameters, leases going
only to a runner that reported the experiment, schedules, and the generic card of a real
run of the example (tests/app/journal/test_own_e2e.py runs it through the real processes).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from app.journal.views import card_markdown, cards
from app.models import Run, RunEvent, Schedule
from jobs.lab.catalogue import own
from jobs.runner.installed import Experiments
from tests.helpers import ROOT, add_token, bearer, count
from tests.real_runs import launch_once, store_run

EXAMPLE = ROOT / "examples" / "experiments" / "tiny_lm.py"
QUICK = {"steps": 3, "warmup": 1, "batch_per_rank": 2, "seq_len": 8, "heads": 1,
         "head_dim": 8, "layers": 1, "vocab": 16, "device": "cpu"}
BROKEN = {
    "syntax.py": "EXPERIMENT = {\n    'name': 'half'\n\ndef run(lab, params):\n    pass\n",
    "nodecl.py": "def run(lab, params):\n    pass\n",
    "called.py": "EXPERIMENT = dict(name='called')\n\ndef run(lab, params):\n    pass\n",
    "noworld.py": "EXPERIMENT = {'name': 'noworld', 'title': 'No ranks', 'params': "
                  "{'steps': {'type': 'int', 'default': 1}}}\n\ndef run(lab, params):\n"
                  "    pass\n",
    "badbounds.py": "EXPERIMENT = {'name': 'badbounds', 'title': 'B', 'params': {"
                    "'world_size': {'type': 'int', 'default': 9, 'min': 1, 'max': 4}}}\n\n"
                    "def run(lab, params):\n    pass\n",
    "norun.py": "EXPERIMENT = {'name': 'norun', 'title': 'N', 'params': {'world_size': "
                "{'type': 'int', 'default': 1, 'min': 1, 'max': 2}}}\n",
    "labname.py": "EXPERIMENT = {'name': 'pipeline', 'title': 'Mine', 'params': {"
                  "'world_size': {'type': 'int', 'default': 1, 'min': 1, 'max': 2}}}\n\n"
                  "def run(lab, params):\n    pass\n",
}
WHY = {"syntax.py": "syntax error, line 1", "nodecl.py": "declares no EXPERIMENT",
       "called.py": "must be a literal", "noworld.py": "world_size is required",
       "badbounds.py": "default: must be <= 4", "norun.py": "no run(lab, params)",
       "labname.py": "one of the lab's own experiments"}


@pytest.fixture
def folder(tmp_path) -> Path:
    """The example and every kind of broken file, as an owner might leave them."""
    path = tmp_path / "experiments"
    path.mkdir()
    shutil.copy(EXAMPLE, path / "tiny_lm.py")
    for name, text in BROKEN.items():
        (path / name).write_text(text)
    (path / "_helpers.py").write_text("x = 1\n")  # not an experiment: skipped
    return path


@pytest.fixture
def register(app, db):
    """register(name, experiments): runner `name` registers (again, with the same token)
    reporting `experiments`; (client, headers, response)."""
    tokens: dict[str, dict] = {}

    def call(name: str, experiments):
        if name not in tokens:
            tokens[name] = bearer(add_token(db, name, "runner"))
        headers = tokens[name]
        client = app.test_client()
        body = {"labels": {"gpu_count": 0}, **({"experiments": experiments}
                                               if experiments is not None else {})}
        return client, headers, client.post("/api/v1/runner/register", json=body,
                                            headers=headers)
    return call


def test_a_folder_reads_each_file_alone_and_says_why_a_file_is_broken(folder):
    found = {e["file"]: e for e in own.read_folder(folder)}
    assert set(found) == {"tiny_lm.py", *BROKEN}  # _helpers.py is not an experiment
    assert "broken" not in found["tiny_lm.py"]
    assert found["tiny_lm.py"]["params"]["world_size"]["default"] == 2
    assert found["tiny_lm.py"]["reports"]["series"]["step_time"]["unit"] == "s"
    for name, why in WHY.items():
        assert why in found[name]["broken"], (name, found[name])
    (folder / "copy.py").write_bytes(EXAMPLE.read_bytes())  # the same name twice
    again = {e["file"]: e for e in own.read_folder(folder)}
    assert "declared by" in again["tiny_lm.py"].get("broken", "") + \
        again["copy.py"].get("broken", "")
    assert own.read_folder("") == []
    assert "cannot be read" in own.read_folder(folder / "missing")[0]["broken"]


def test_reported_experiments_show_in_the_catalogue_with_the_broken_files(register, client,
                                                                         folder):
    _, _, r = register("gpu-own", own.read_folder(folder))
    assert r.status_code == 200, r.get_json()
    listed = client.get("/api/v1/experiments").get_json()
    mine = [e for e in listed["experiments"] if e.get("own")]
    assert [e["name"] for e in mine] == ["tiny_lm"] and mine[0]["runners"] == ["gpu-own"]
    assert {b["file"] for b in listed["broken"]} == set(BROKEN)
    assert all(b["runner"] == "gpu-own" for b in listed["broken"])
    assert any(e["name"] == "pipeline" and not e.get("own") for e in listed["experiments"])
    one = client.get("/api/v1/experiments/tiny_lm").get_json()
    assert one["title"].startswith("Tiny language model") and "loss" in one["result"]

    page = client.get("/experiments").text
    assert "Tiny language model" in page and 'href="/experiments/tiny_lm/run"' in page
    assert "syntax.py" in page and "syntax error, line 1" in page
    form = client.get("/experiments/tiny_lm/run")
    assert form.status_code == 200 and 'name="param.head_dim"' in form.text


def test_the_server_checks_what_a_runner_reports(register, client):
    _, _, r = register("liar", [{"name": "evil", "title": "x", "params": {}}])
    assert r.status_code == 200
    assert "refused by the server" in client.get("/api/v1/experiments").get_json()[
        "broken"][0]["broken"]
    _, _, bad = register("junk", [{"name": "x"}] * 80)
    assert bad.status_code == 422 and bad.get_json()["error"]["field"] == "experiments"
    _, _, bad = register("junk2", "tiny_lm")
    assert bad.status_code == 422
    assert [e["name"] for e in client.get("/api/v1/experiments").get_json()["experiments"]
            if e.get("own")] == []


@pytest.mark.parametrize("params, field", [
    ({"steps": 0}, "steps"), ({"device": "tpu"}, "device"), ({"lr": "fast"}, "lr"),
    ({"world_size": 9}, "world_size"), ({"nonsense": 1}, "nonsense"),
])
def test_bad_parameters_of_an_own_experiment_create_nothing(register, db, client, folder,
                                                            params, field):
    register("gpu-own", own.read_folder(folder))
    r = client.post("/api/v1/runs", json={"experiment": "tiny_lm", "params": params})
    assert r.status_code == 422 and r.get_json()["error"]["field"] == field
    if field != "nonsense":  # (the form has no such field to send)
        page = client.post("/experiments/tiny_lm/run",
                           data={f"param.{k}": str(v) for k, v in params.items()})
        assert page.status_code == 422 and f"{field}" in page.text
    unknown = client.post("/api/v1/runs", json={"experiment": "syntax", "params": {}})
    assert unknown.status_code == 422 and unknown.get_json()["error"]["field"] == "experiment"
    assert client.get("/experiments/half/run").status_code == 404
    assert count(db, Run) == 0 and count(db, RunEvent) == 0


def test_only_a_runner_that_reported_it_is_given_its_run(register, client, folder):
    plain = register("plain", None)
    mine = register("gpu-own", own.read_folder(folder))
    r = client.post("/api/v1/runs", json={"experiment": "tiny_lm", "params": QUICK})
    assert r.status_code == 201, r.get_json()
    run_id = r.get_json()["id"]
    for who in (plain,):
        answer = who[0].post("/api/v1/runner/lease", json={"wait": 0}, headers=who[1])
        assert answer.status_code == 204
    answer = mine[0].post("/api/v1/runner/lease", json={"wait": 0}, headers=mine[1])
    assert answer.get_json()["run"]["id"] == run_id
    assert answer.get_json()["run"]["params"]["head_dim"] == 8
    # a runner that stops reporting it (its file removed) takes no more of its runs
    register("gpu-own", [])
    assert client.post("/api/v1/runs", json={"experiment": "tiny_lm"}).status_code == 422


def test_a_schedule_of_an_own_experiment(register, db, client, folder):
    register("gpu-own", own.read_folder(folder))
    good = {"name": "nightly", "experiment": "tiny_lm", "cron": "0 2 * * *",
            "timezone": "UTC", "params": QUICK}
    r = client.post("/api/v1/schedules", json=good)
    assert r.status_code == 201, r.get_json()
    assert r.get_json()["params"]["head_dim"] == 8
    bad = client.post("/api/v1/schedules", json={**good, "params": {"steps": -1}})
    assert bad.status_code == 422 and bad.get_json()["error"]["field"] == "steps"
    assert count(db, Schedule) == 1
    page = client.get(f"/schedules/{r.get_json()['id']}")
    assert page.status_code == 200 and 'name="param.head_dim"' in page.text
    register("gpu-own", [])  # gone from every runner: the page still opens
    assert client.get(f"/schedules/{r.get_json()['id']}").status_code == 200


def test_the_card_of_a_real_run_shows_its_numbers_charts_table_and_environment(
        register, app, db, client, folder, tmp_path_factory):
    register("gpu-own", own.read_folder(folder))
    out, ran = launch_once(tmp_path_factory, "tiny_lm", QUICK,
                           env={own.FOLDER_ENV: str(folder)})
    assert ran["rc"] == 0, ran["stdout"][-3000:] + ran["stderr"][-3000:]
    first = store_run(app, "tiny_lm", out)
    second = store_run(app, "tiny_lm", out)
    with db.read() as session:
        html = cards.card(session.get(Run, first))
        markdown, files = card_markdown.run_markdown(session, f"```run\nid: {first}\n```")
    result = json.loads((out / "result.json").read_text())
    final = result["reported"]["scalars"]["final_loss"]
    assert "Tiny language model" in html and "final_loss" in html
    assert f"{final:.4g}" in html
    assert html.count('class="card-chart"') == 2  # loss and step_time
    assert "ranks" in html and "Environment" in html and "gloo" in html
    assert "| final_loss |" in markdown and f"{final:.4g}" in markdown
    assert list(files) == [f"run-{first}.svg"] and "<svg" in files[f"run-{first}.svg"]
    page = client.get(f"/runs/{first}").text
    assert "final_loss" in page and "Tiny language model" in page
    compare = client.get(f"/runs/compare?ids={first},{second}")
    assert compare.status_code == 200 and "tokens_per_s" in compare.text


def test_the_agent_lists_its_folder_through_the_lab_and_notices_changes(folder, tmp_path):
    listed = Experiments(str(folder))
    assert {e["name"] for e in listed.read() if "broken" not in e} == {"tiny_lm"}
    assert not listed.changed()
    (folder / "tiny_lm.py").write_text((folder / "tiny_lm.py").read_text() + "\n# edited\n")
    assert listed.changed()
    gone = Experiments(str(tmp_path / "nowhere")).read()
    assert len(gone) == 1 and "cannot be read" in gone[0]["broken"]
