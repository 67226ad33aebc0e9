"""The lab's contract with whoever starts it (base/contract.py), and the layers:
the lab imports neither the runner nor the app; the runner is stdlib plus the contract;
the modules the app and the runner import never pull in torch."""

from __future__ import annotations

import ast
import subprocess
import sys

from lab_helpers import ROOT

from base import contract


def test_every_reason_has_one_exit_code_and_each_code_one_meaning():
    assert set(contract.LAB_REASONS) == set(contract.EXIT_CODES) - {"succeeded"}
    assert contract.EXIT_CODES["succeeded"] == 0
    assert {contract.EXIT_CODES[c] for c in ("rank_failed", "out_of_memory",
                                             "collective_timeout")} == {4}
    assert [contract.reason_for_exit(rc) for rc in range(9)] == [
        None, None, "invalid_params", "correctness", "rank_failed", "timeout", "unsupported",
        "cancelled", None]


def test_a_progress_line_reads_back_as_it_was_written():
    line = contract.progress_line(3, 10, {"strategy": "ddp", "phase": "timed",
                                          "step_time_s": "0.014", "tokens_per_s": "1.822e+04",
                                          "bytes": "1024"})
    assert line == ("progress step=3 total=10 strategy=ddp phase=timed step_time_s=0.014 "
                    "tokens_per_s=1.822e+04 bytes=1024")
    assert contract.parse_progress(line + "\n") == (
        3, 10, {"strategy": "ddp", "phase": "timed", "step_time_s": 0.014,
                "tokens_per_s": 18220.0, "bytes": 1024})
    assert contract.progress_line(1, 2, {}) == "progress step=1 total=2"
    assert contract.parse_progress("progress step=1 total=2") == (1, 2, {})
    assert contract.parse_progress("step 1 of 2") is None


def test_torchrun_pgid_is_read_back_from_the_pids_file(tmp_path):
    assert contract.torchrun_pgid(tmp_path) is None
    (tmp_path / contract.PIDS_FILE).write_text('{"launcher": 1, "torchrun_pgid": 4242}')
    assert contract.torchrun_pgid(tmp_path) == 4242


def _imports(package: str) -> dict[str, set[str]]:
    """module path -> every module it imports (statically, wherever the import is)."""
    out = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        names = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names.add(node.module)
        out[str(path.relative_to(ROOT))] = names
    return out


def test_the_lab_is_the_bottom_layer():
    for path, names in _imports("jobs/lab").items():
        wrong = {n for n in names if n.split(".")[0] == "app" or n.startswith("jobs.runner")}
        assert not wrong, f"{path} imports {wrong}"


def test_the_runner_is_stdlib_plus_the_shared_base():
    for path, names in _imports("jobs/runner").items():
        wrong = {n for n in names if n.split(".")[0] not in sys.stdlib_module_names
                 and n.split(".")[0] != "base" and not n.startswith("jobs.runner")}
        assert not wrong, f"{path} imports {wrong}"


def test_what_the_app_and_the_runner_import_leaves_torch_out():
    probe = ("import sys, jobs.lab.catalogue.registry, base.contract, base.durable, "
             "jobs.lab.launcher.launch, jobs.lab.__main__, jobs.runner; "
             "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'app')))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True,
                         text=True, timeout=60, check=True).stdout
    assert out.strip() == "[]"
