"""Where the test suite's CPU goes: a pytest plugin that records each test module's user and
system CPU seconds, of the test process and of every process under it (gunicorn, the
runners, the lab's ranks, Chromium), and a report over what it recorded.

    nice -n 10 .venv/bin/python -m pytest -n 0 -q -p bench.suite_cpu --suite-cpu=cpu.tsv tests/x
    .venv/bin/python bench/suite_cpu.py cpu.tsv               # the modules, costliest first
    .venv/bin/python bench/suite_cpu.py before.tsv after.tsv  # the same modules side by side

CPU, not wall time: on a shared machine a module's wall time says as much about its
neighbours as about itself, while the CPU its processes spent is theirs alone. Under xdist
each worker appends its own modules' lines (one `write` each), so a `-n 2` run records the
whole suite; the `start`/`end` columns (seconds since the epoch) show how the workers were
kept busy.

The count is taken where a module begins and ends: the process's own CPU and its reaped
children's (getrusage), plus every live descendant's own and reaped children's (/proc),
so a browser kept open across modules is charged to the module that used it. A process
orphaned before its parent reaped it is not counted: a module's figure is a floor.
Session fixtures are charged to the module that first asks for them; each worker's
collection (every module imported) is its own `(collection)` line.
"""

from __future__ import annotations

import os
import resource
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

COLUMNS = ("module", "worker", "tests", "user", "system", "wall", "start", "end")


TICK = os.sysconf("SC_CLK_TCK")


def descendants_cpu() -> tuple[float, float]:
    """User and system seconds of every live process under this one, each with its reaped
    children's (/proc/PID/stat: utime, stime, cutime, cstime)."""
    parents, times = {}, {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        pid = int(entry.name)
        parents[pid] = int(fields[1])
        times[pid] = (int(fields[11]) + int(fields[13]), int(fields[12]) + int(fields[14]))
    children: dict[int, list[int]] = defaultdict(list)
    for pid, parent in parents.items():
        children[parent].append(pid)
    user = system = 0
    stack = list(children[os.getpid()])
    while stack:
        pid = stack.pop()
        user += times[pid][0]
        system += times[pid][1]
        stack.extend(children[pid])
    return user / TICK, system / TICK


def cpu() -> tuple[float, float]:
    """User and system seconds of this process, of the children it reaped and of every
    live process under it."""
    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(
        resource.RUSAGE_CHILDREN)
    user, system = descendants_cpu()
    return me.ru_utime + children.ru_utime + user, me.ru_stime + children.ru_stime + system


class Recorder:
    def __init__(self, path: Path, worker: str) -> None:
        self.path, self.worker = path, worker
        self.modules: dict[str, list] = {}
        self.current: tuple | None = None  # (module, user, system, start) being run
        self.tests = 0
        self.began = (*cpu(), time.time())

    def add(self, module: str, user: float, system: float, start: float, end: float,
            tests: int = 0) -> None:
        row = self.modules.setdefault(module, [0, 0.0, 0.0, 0.0, start, end])
        row[0] += tests
        row[1] += user
        row[2] += system
        row[3] += end - start
        row[5] = end

    @pytest.hookimpl(hookwrapper=True)
    def pytest_collection(self, session):
        user, system = cpu()
        start = time.time()
        yield
        after = cpu()
        self.add("(collection)", after[0] - user, after[1] - system, start, time.time())

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        """Counted once where a module's run of tests begins and once where it ends: the
        /proc walk can cost more than a quick test."""
        module = item.nodeid.split("::", 1)[0]
        if self.current is None:
            self.current = (module, *cpu(), time.time())
        yield
        self.tests += 1
        if nextitem is None or nextitem.nodeid.split("::", 1)[0] != module:
            user, system = cpu()
            _, user0, system0, start = self.current
            self.add(module, user - user0, system - system0, start, time.time(), self.tests)
            self.current, self.tests = None, 0

    def pytest_sessionfinish(self, session):
        lines = [
            "\t".join([module, self.worker, str(tests), f"{user:.2f}", f"{system:.2f}",
                       f"{wall:.2f}", f"{start:.1f}", f"{end:.1f}"]) + "\n"
            for module, (tests, user, system, wall, start, end) in self.modules.items()]
        user, system = cpu()
        lines.append("\t".join(["(process)", self.worker, "0", f"{user - self.began[0]:.2f}",
                                f"{system - self.began[1]:.2f}",
                                f"{time.time() - self.began[2]:.2f}",
                                f"{self.began[2]:.1f}", f"{time.time():.1f}"]) + "\n")
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            for line in lines:  # one write a line: O_APPEND keeps the workers' lines whole
                os.write(fd, line.encode())
        finally:
            os.close(fd)


def pytest_addoption(parser):
    parser.addoption("--suite-cpu", metavar="PATH", default=None,
                     help="append each test module's CPU seconds (with its children's) to PATH")


def pytest_configure(config):
    path = config.getoption("--suite-cpu")
    if path:
        worker = getattr(config, "workerinput", {}).get("workerid", "controller")
        config.pluginmanager.register(Recorder(Path(path).resolve(), worker), "suite-cpu")


def read(path: str) -> dict[str, dict]:
    """A recording's modules, each summed over the workers that ran any of it."""
    modules: dict[str, dict] = defaultdict(lambda: dict.fromkeys(COLUMNS[2:6], 0.0))
    for line in Path(path).read_text().splitlines():
        fields = dict(zip(COLUMNS, line.split("\t"), strict=True))
        for column in COLUMNS[2:6]:
            modules[fields["module"]][column] += float(fields[column])
    return modules


def main(argv: list[str]) -> None:
    if len(argv) == 1:
        modules = read(argv[0])
        ranked = sorted(modules.items(), key=lambda kv: -(kv[1]["user"] + kv[1]["system"]))
        print(f"{'cpu s':>8} {'user':>8} {'system':>8} {'wall':>8} {'tests':>6}  module")
        for module, row in ranked:
            print(f"{row['user'] + row['system']:8.1f} {row['user']:8.1f} {row['system']:8.1f}"
                  f" {row['wall']:8.1f} {int(row['tests']):6d}  {module}")
        tests = [row for module, row in modules.items() if not module.startswith("(")]
        print(f"{sum(r['user'] + r['system'] for r in tests):8.1f} in the tests of "
              f"{len(tests)} modules")
    elif len(argv) == 2:
        before, after = read(argv[0]), read(argv[1])
        both = [m for m in after if m in before]
        print(f"{'before':>8} {'after':>8} {'saved':>8}  module (cpu s)")
        for module in sorted(both, key=lambda m: -(before[m]["user"] + before[m]["system"])):
            b = before[module]["user"] + before[module]["system"]
            a = after[module]["user"] + after[module]["system"]
            print(f"{b:8.1f} {a:8.1f} {b - a:8.1f}  {module}")
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
