"""A served worker holds what a small host can afford: the settings that keep it small are in
effect in a real `commonplace web` (gunicorn with gunicorn.conf.py, started as
app/supervisor.py's gunicorn_argv starts it), read from /proc after it served pages to
several clients at once (docs/PERFORMANCE.md, *A small host*)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.tailnet import WebServer, fetch

HEAP_MAX = 64 << 20  # glibc's reservation for each arena beyond the main one (64-bit)
PAGES = ("/", "/sitemap", "/search?q=note", "/experiments", "/runs", "/api/v1/entries")


def workers(master: int) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                stat = (proc / "stat").read_text()
            except OSError:  # ended meanwhile
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == master:
                found.append(int(proc.name))
    return found


def malloc_arenas(pid: int) -> int:
    """glibc's arenas besides the main one: each a 64 MiB-aligned anonymous reservation,
    its used part read-write and the rest inaccessible, the two adding up to 64 MiB."""
    regions = []
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        fields = line.split()
        start, end = (int(x, 16) for x in fields[0].split("-"))
        regions.append((start, end, fields[1], len(fields) > 5))
    pairs = zip(regions, regions[1:], strict=False)  # each region and the next
    return sum(1 for (start, end, mode, named), (after, stop, rest, _) in pairs
               if start % HEAP_MAX == 0 and not named and mode == "rw-p" and after == end
               and rest == "---p" and stop - start == HEAP_MAX)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """`commonplace web` after eight clients at once read every kind of page (every
    worker thread busy at the same time), and its workers' process ids: one for the
    module, whose tests only read its workers' /proc files."""
    server = WebServer(tmp_path_factory.mktemp("data"), COMMONPLACE_AUTH="dev")
    try:
        with ThreadPoolExecutor(8) as pool:
            statuses = list(pool.map(lambda path: fetch(server.base + path)[0], PAGES * 8))
        assert statuses == [200] * len(statuses)
        found = workers(server.proc.pid)
        assert found, "gunicorn started no worker"
        yield found
    finally:
        server.close()


def test_a_served_worker_runs_without_docstrings_and_with_two_malloc_arenas(served):
    for pid in served:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        assert argv[1] == b"-OO", argv  # gunicorn_argv's WEB_PYTHON
        # gunicorn.conf.py's mallopt(M_ARENA_MAX, 2): the main arena and at most one more,
        # however many threads served at once (glibc's default: one per thread, up to 8
        # a core)
        assert malloc_arenas(pid) <= 1


def test_a_served_worker_started_without_glibcs_per_thread_malloc_caches(served):
    for pid in served:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        tunables = [v.split(b"=", 1)[1].split(b":") for v in environ
                    if v.startswith(b"GLIBC_TUNABLES=")]
        # app/supervisor.py's WEB_MALLOC, read by glibc as the web's gunicorn started
        # (after any tunables the environment had: the last setting wins)
        assert len(tunables) == 1 and tunables[0][-1] == b"glibc.malloc.tcache_count=0", \
            tunables


def test_the_webs_environment_keeps_the_tunables_it_had_and_turns_the_caches_off_last():
    from app.supervisor import web_environment

    assert web_environment({"A": "1"}) == {"A": "1",
                                           "GLIBC_TUNABLES": "glibc.malloc.tcache_count=0"}
    kept = web_environment({"GLIBC_TUNABLES": "glibc.malloc.check=3"})
    assert kept == {"GLIBC_TUNABLES": "glibc.malloc.check=3:glibc.malloc.tcache_count=0"}
