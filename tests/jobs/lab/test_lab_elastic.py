"""The ranks are forked from torchrun's agent (jobs/lab/launcher/elastic.py), with torch, its
compiler and the experiment's code already loaded; the worker still runs as a process of
its own under plain torchrun."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

from lab_helpers import PLUGINS, ROOT, TINY, launch, start

from jobs.lab.catalogue import registry
from jobs.lab.launcher.launch import command as launch_command
from jobs.lab.launcher.launch import environment
from tests.journal_harness import alive, wait_until

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
        assert "phase=starting ranks=2 start_method=fork device=cpu" in run.stdout
        # loaded before the worker imported the experiment (the plugin runs first)
        assert {"torch._dynamo", "jobs.lab.experiments.training"} <= set(rank["modules"])
        assert rank["nvml_check"] == "1"  # the agent asked NVML, never cuInit
        assert rank["sigterm_default"]  # not the agent's handler, which raises
        # a number: a forked rank that looked up a name could hang on the resolver's lock
        assert rank["master_addr"] == "127.0.0.1"


def test_cuda_ranks_start_by_forkserver_when_nvml_cannot_answer(tmp_path):
    """The case that made torch call cuInit in the agent: NVML unloadable (an empty
    library path, and this host has none) and MIG devices named, which torch does not
    even ask NVML about. The ranks are not the agent's children but the forkserver's, with
    the experiment preloaded there; on this CPU-only host they then report that no CUDA
    device is visible, a result, not a crash."""
    origins = tmp_path / "origins"
    origins.mkdir()
    no_libs = tmp_path / "no-libs"
    no_libs.mkdir()
    run = launch("data_parallel", {**DP, "device": "cuda"}, tmp_path / "run",
                 env={"COMMONPLACE_LAB_PLUGIN": str(PLUGINS / "rank_origin.py"),
                      "RANK_ORIGIN_DIR": str(origins), "LD_LIBRARY_PATH": str(no_libs),
                      "CUDA_VISIBLE_DEVICES": "MIG-4b0e3a3c-5b1e-5a3c-9f43-0c3e7d0a1b2c"})
    log = (tmp_path / "run" / "output.log").read_text()
    assert "phase=starting ranks=2 start_method=forkserver device=cuda" in log
    assert log.count("phase=loading") == 1  # the agent's, not the forkserver's import
    assert run.result["reason"]["code"] == "unsupported", log[-2000:]
    agent = json.loads((tmp_path / "run" / "pids.json").read_text())["torchrun_pgid"]
    for r in range(2):
        rank = json.loads((origins / f"rank{r}.json").read_text())
        assert rank["parent"] != agent
        assert "forkserver" in rank["parent_cmdline"]
        assert "jobs.lab.experiments.training" in rank["modules"]


PRELOAD = """
import importlib, torch
asked = []
for name in ("is_available", "device_count", "init", "_lazy_init", "current_device",
             "get_device_name", "get_device_properties", "set_device"):
    real = getattr(torch.cuda, name)
    setattr(torch.cuda, name, lambda *a, _real=real, _name=name, **k:
            asked.append(_name) or _real(*a, **k))
from jobs.lab.launcher import elastic, worker
for module in [elastic.FORKSERVER, elastic.AGENT, elastic.WORKER,
               *worker.IMPLEMENTATIONS.values()]:
    importlib.import_module(module)
print("asked", sorted(set(asked)))
"""


def test_what_the_forkserver_preloads_never_asks_cuda():
    """The forkserver imports the agent, the worker and every experiment before it forks a
    rank: were any of them to ask torch.cuda at import, CUDA would be initialised in the
    forkserver (NVML failing) and every rank forked from it broken. This CPU build cannot
    initialise CUDA, so the test records what is asked."""
    proc = subprocess.run([sys.executable, "-c", PRELOAD], cwd=ROOT, capture_output=True,
                          text=True, timeout=240,
                          env={**os.environ, "PYTORCH_NVML_BASED_CUDA_CHECK": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "asked []"


def test_a_killed_launcher_leaves_no_forkserver_rank_alive(tmp_path):
    """The GPU path's ranks are the forkserver's children, not the agent's: SIGKILL of the
    launcher must still end the agent, the forkserver and every rank (checked by PID)."""
    pids_dir = tmp_path / "pids"
    pids_dir.mkdir()
    out = tmp_path / "run"
    proc = start("data_parallel", {**DP, "device": "cuda"}, out,
                 env={"COMMONPLACE_LAB_PLUGIN": str(PLUGINS / "sleep_before_the_device.py"),
                      "RANK_PIDS_DIR": str(pids_dir)})
    started: list[int] = [proc.pid]
    try:
        files = [pids_dir / f"rank{r}.json" for r in range(2)]
        wait_until("both ranks to start", lambda: all(f.exists() and f.read_text()
                                                      for f in files), 180)
        ranks = [json.loads(f.read_text()) for f in files]
        agent = json.loads((out / "pids.json").read_text())["torchrun_pgid"]
        forkserver = {r["parent"] for r in ranks}
        started += [agent, *forkserver, *(r["pid"] for r in ranks)]
        assert agent not in forkserver and len(forkserver) == 1
        assert all(map(alive, started))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        wait_until("the agent, the forkserver and every rank to end",
                   lambda: not any(map(alive, started)), 60)
    finally:
        for pid in started:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait(timeout=30)


def test_the_start_method_forks_only_where_no_rank_can_touch_cuda():
    # Imported here: the agent's module imports torch, and every xdist worker imports
    # every test module to collect it.
    from jobs.lab.launcher.elastic import requested_device, start_method

    assert start_method("cpu", cuda_built=True) == "fork"
    assert start_method("auto", cuda_built=False) == "fork"
    assert start_method("auto", cuda_built=True) == "forkserver"
    assert start_method("cuda", cuda_built=False) == "forkserver"
    assert requested_device(["zero", "--params", '{"device": "cuda"}', "--out", "x"]) == "cuda"
    assert requested_device(["zero", "--params", "{}"]) == "auto"
    assert requested_device(["zero", "--params", "[1]"]) == "auto"
    assert requested_device(["zero"]) == "auto"


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
