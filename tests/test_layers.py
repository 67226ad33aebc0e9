"""The code's shape, checked like its behaviour: the import-linter contracts in
pyproject.toml (layers one way, no cycles, no torch in the server), modules small enough
to hold one idea, and names that say one thing within their package."""

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("app", "base", "bench", "cpl", "jobs", "tests")


def modules() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def test_import_contracts_hold():
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or "lint-imports"
    done = subprocess.run([lint, "--no-cache"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


def test_no_module_holds_more_than_400_lines():
    long = {str(p.relative_to(ROOT)): n for p in modules()
            if (n := len(p.read_text().splitlines())) > 400}
    assert not long, f"split these along their ideas: {long}"


def test_no_module_stands_beside_a_folder_of_its_own_name():
    # A name is unique within its package, not across the project: the folder says what
    # (jobs/lab/predict/), the file says which (mesh.py beside strategies/mesh.py).
    assert [str(p.relative_to(ROOT)) for p in modules() if p.with_suffix("").is_dir()] == []
