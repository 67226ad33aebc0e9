"""The owner's own experiment through the real processes: gunicorn, the scheduler, a runner
agent whose COMMONPLACE_EXPERIMENTS folder holds the shipped example (and a broken file),
and the lab under torchrun on CPU with gloo. It shows in the catalogue, runs to SUCCEEDED
from the web's form and from `cpl run`, and its card shows the numbers it reported.
"""

from __future__ import annotations

import re
import shutil
import urllib.parse
import urllib.request

import pytest

from tests.client_helpers import Terminal
from tests.helpers import ROOT, stop_process
from tests.journal_harness import Journal, api, wait_until

QUICK = {"steps": "3", "warmup": "1", "batch_per_rank": "2", "seq_len": "8", "heads": "1",
         "head_dim": "8", "layers": "1", "vocab": "16", "device": "cpu"}

# declared well, fails when it runs: an error only a run can find
CRASHES = """
EXPERIMENT = {"name": "crashes", "title": "Crashes", "params": {
    "world_size": {"type": "int", "default": 1, "min": 1, "max": 2},
    "device": {"type": "str", "default": "cpu", "choices": ["cpu"]}}}


def run(lab, params):
    lab.scalar("before", 1)
    raise ValueError("the owner's bug")
"""


def own_names(server) -> set[str]:
    return {e["name"] for e in api(server.base, "/api/v1/experiments")[1]["experiments"]
            if e.get("own")}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("own-experiments")
    shutil.copy(ROOT / "examples" / "experiments" / "tiny_lm.py", folder)
    (folder / "typo.py").write_text("EXPERIMENT = {'name': 'typo',\ndef run(lab, params): pass\n")
    (folder / "crashes.py").write_text(CRASHES)
    journal = Journal(tmp_path_factory.mktemp("own-server"))
    journal.folder = folder
    runner = None
    try:
        journal.start()
        token = journal.token("ownhost")
        runner = journal.spawn("runner-ownhost", [
            "runner", "--server", journal.base, "--work-dir", str(journal.data_dir / "work")],
            {"COMMONPLACE_RUNNER_TOKEN": token, "COMMONPLACE_EXPERIMENTS": str(folder)})
        wait_until("the runner's report", lambda: "tiny_lm" in own_names(journal), 60)
        yield journal
    finally:
        if runner is not None:
            stop_process(runner)
        journal.stop()


def test_the_catalogue_shows_it_and_the_broken_file_beside_it(server):
    listed = api(server.base, "/api/v1/experiments")[1]
    assert [b["file"] for b in listed["broken"]] == ["typo.py"]
    assert "syntax error" in listed["broken"][0]["broken"]
    with urllib.request.urlopen(server.base + "/experiments", timeout=30) as page:
        html = page.read().decode()
    assert "Tiny language model" in html and "typo.py" in html
    # a file added while the runner runs is reported without a restart
    text = (server.folder / "tiny_lm.py").read_text().replace('"name": "tiny_lm"',
                                                              '"name": "tiny_lm_two"')
    (server.folder / "second.py").write_text(text)
    wait_until("the new file's report", lambda: "tiny_lm_two" in own_names(server), 60)
    (server.folder / "second.py").unlink()
    wait_until("its removal", lambda: "tiny_lm_two" not in own_names(server), 60)


def test_a_run_from_the_web_form_succeeds_and_its_card_shows_its_numbers(server):
    form = urllib.parse.urlencode({f"param.{k}": v for k, v in QUICK.items()}).encode()
    with urllib.request.urlopen(urllib.request.Request(
            server.base + "/experiments/tiny_lm/run", data=form, method="POST"),
            timeout=30) as answer:  # 303 to the run's page, followed
        run_id = int(re.search(r"/runs/(\d+)$", answer.geturl())[1])
    run = server.wait_status(run_id, ["SUCCEEDED", "FAILED", "LOST"], timeout=180)
    assert run["status"] == "SUCCEEDED", run["reason"]
    assert run["runner"] == "ownhost" and run["params"]["head_dim"] == 8
    scalars = run["result"]["reported"]["scalars"]
    assert scalars["final_loss"] is not None and len(run["result"]["reported"]["series"]
                                                     ["loss"]) == 4
    with urllib.request.urlopen(f"{server.base}/runs/{run_id}", timeout=30) as page:
        html = page.read().decode()
    assert "final_loss" in html and f"{scalars['final_loss']:.4g}" in html
    assert html.count('class="card-chart"') == 2 and "Environment" in html


def test_cpl_runs_it_and_shows_its_report(server, tmp_path):
    cpl = Terminal(tmp_path / "home", server.base)
    listed = cpl("experiments")
    assert listed.rc == 0 and "tiny_lm" in listed.out
    args = [a for k, v in QUICK.items() for a in ("-p", f"{k}={v}")]
    ran = cpl("run", "tiny_lm", *args, "--watch", "--exit-status", "--interval", "0.5",
              timeout=180)
    assert ran.rc == 0, ran.out + ran.err
    run_id = int(ran.out.splitlines()[0])
    assert ran.out.splitlines()[-1].startswith(f"run {run_id} SUCCEEDED")
    shown = cpl("runs", "show", str(run_id))
    assert "Tiny language model" in shown.out and "final_loss" in shown.out
    bad = cpl("run", "tiny_lm", "-p", "steps=0")
    assert bad.rc != 0 and "steps" in bad.out + bad.err


def test_an_exception_in_the_owners_code_fails_the_run_and_the_runner_goes_on(server):
    run_id = server.create("crashes")
    run = server.wait_status(run_id, ["SUCCEEDED", "FAILED", "LOST"], timeout=180)
    assert (run["status"], run["reason_code"]) == ("FAILED", "rank_failed")
    assert "ValueError: the owner's bug" in run["reason"]
    after = server.create("tiny_lm", **{k: int(v) if v.isdigit() else v
                                        for k, v in QUICK.items()})
    assert server.wait_status(after, ["SUCCEEDED", "FAILED", "LOST"],
                              timeout=180)["status"] == "SUCCEEDED"
