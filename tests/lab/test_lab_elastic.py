"""The ranks are forked from torchrun's agent (jobs/lab/launcher/elastic.py), with torch, its
compiler and the experiment's code already loaded; the worker still runs as a process of
its own under plain torchrun."""

from __future__ import annotations

import json
import subprocess
import sys

from lab_helpers import PLUGINS, ROOT, TINY, launch

from jobs.lab.catalogue import registry
from jobs.lab.launcher.launch import command as launch_command
from jobs.lab.launcher.launch import environment

DP = {**TINY, "world_size": 2, "strategies": ["ddp"]}


def test_ranks_are_forked_from_the_agent_with_the_experiment_loaded(tmp_path):
    origins = tmp_path / "origins"
    origins.mkdir()
    run = launch("data_parallel", DP, tmp_path / "run",
                 env={"COMMONPLACE_LAB_PLUGIN": str(PLUGINS / "rank_origin.py"),
                      "RANK_ORIGIN_DIR": str(origins)})
    assert run.rc == 0, run.stderr[-2000:]
    agent = json.loads((tmp_path / "run" / "pids.json").read_text())["torchrun_pgid"]
    ranks = [json.loads((origins / f"rank{r}.json").read_text()) for r in range(2)]
    for rank in ranks:
        assert rank["parent"] == agent  # forked by the agent, not started by a shell
        # loaded before the worker imported the experiment (the plugin runs first)
        assert {"torch._dynamo", "jobs.lab.experiments.training"} <= set(rank["modules"])
        assert rank["nvml_check"] == "1"  # the agent asked NVML, never cuInit
        assert rank["sigterm_default"]  # not the agent's handler, which raises


def test_the_agent_runs_only_the_lab_worker(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "jobs.lab.launcher.elastic", "--standalone",
                           "--nproc-per-node=1", "-m", "http.server"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "runs only -m jobs.lab.launcher.worker" in proc.stderr


def test_the_worker_runs_under_plain_torchrun_too(tmp_path):
    params = registry.validate("data_parallel", DP)
    cmd = launch_command("data_parallel", params, str(tmp_path))
    cmd[cmd.index("jobs.lab.launcher.elastic")] = "torch.distributed.run"  # the same flags
    proc = subprocess.run(cmd, cwd=ROOT, env=environment(params), capture_output=True,
                          text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["status"] == "succeeded"
    assert all((tmp_path / f"done.rank{r}").exists() for r in range(2))
