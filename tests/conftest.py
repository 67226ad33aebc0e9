"""Shared fixtures: a real SQLite file in a temporary data directory, migrated with the real
migrations, and the app built on it. Dev mode (loopback is the owner) unless a test says
otherwise; `served` is serve mode. Plain helpers are in tests/helpers.py."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from app import bytecode, create_app, upgrades
from app import db as dbmod
from tests.helpers import OWNER, ROOT, VIEWER, Served, commonplace_up

# The modules that take longest from start to end (most of it waiting on the processes they
# start), handed to the xdist workers first. `--dist loadfile` gives out whole modules in
# collection order when `--no-loadscope-reorder` is set (pyproject's addopts); xdist's own
# order puts the modules with the most tests first, which left the single long tests
# (Lighthouse, every page) to start last and finish alone on one worker while the others
# stood idle. Longest first: the short modules fill the gaps at the end.
# docs/PERFORMANCE.md, *The test suite*, says how the list was measured.
LONGEST_FIRST = (
    "tests/jobs/lab/test_lab_matrix.py",
    "tests/browser/test_lighthouse.py",
    "tests/app/journal/test_journal_e2e.py",
    "tests/app/notebook/test_render_bounds.py",
    "tests/cpl/test_client_e2e.py",
    "tests/app/web/test_fuzz.py",
    "tests/jobs/runner/test_gang_agents.py",
    "tests/app/test_deploy.py",
    "tests/app/journal/test_trend_runs.py",
    "tests/jobs/lab/test_lab_failures.py",
    "tests/browser/test_every_page.py",
    "tests/app/journal/test_alerts.py",
    "tests/app/web/test_server.py",
    "tests/app/web/test_floods.py",
    "tests/jobs/lab/test_lab_gate.py",
    "tests/app/notebook/test_real_vaults.py",
    "tests/app/journal/test_cards.py",
    "tests/jobs/lab/test_lab_gang.py",
    "tests/app/test_backup_drill.py",
    "tests/app/journal/test_own_e2e.py",
    "tests/app/publishing/test_publish.py",
    "tests/app/journal/test_sharding.py",
    "tests/jobs/lab/test_lab_mesh.py",
)


def pytest_collection_modifyitems(items):
    """LONGEST_FIRST ahead of the rest; otherwise collection order (a stable sort keeps
    every module's tests together and in their own order)."""
    rank = {path: n for n, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))


def pytest_configure(config):
    """Compile the project's modules and the web's libraries to bytecode once, before any
    test starts a process (app/bytecode.py says why): the suite starts hundreds of them, and
    with PYTHONDONTWRITEBYTECODE set, as in this project's sandboxes, each compiled what it
    imported from source again. Once, in the controller (an xdist worker has
    `workerinput`)."""
    if not hasattr(config, "workerinput"):
        bytecode.compile_all()
        if config.getoption("numprocesses", None):
            rewrite_test_modules(config)


def rewrite_test_modules(config) -> None:
    """Every xdist worker imports every test module, and pytest rewrites a test module's
    asserts from source unless it finds the rewritten module cached, which it writes only
    where bytecode is written: each worker rewrote the whole suite, the larger part of its
    collection (docs/PERFORMANCE.md, *The test suite*). The controller writes the cache
    once, as pytest would, before the workers start; they read it whatever
    PYTHONDONTWRITEBYTECODE says. pytest's cache functions are its own: a pytest without
    them leaves each worker to rewrite as before."""
    try:
        from _pytest.assertion import rewrite

        state = config.stash[rewrite.assertstate_key]
        for path in sorted((ROOT / "tests").rglob("*.py")):
            if not (path.name.startswith("test_") or path.name == "conftest.py"):
                continue
            pyc = rewrite.get_cache_dir(path) / (path.name[:-3] + rewrite.PYC_TAIL)
            if rewrite._read_pyc(path, pyc) is None and rewrite.try_makedirs(pyc.parent):
                source_hash, code = rewrite._rewrite_test(path, config)
                rewrite._write_pyc(state, code, source_hash, pyc)
    except (ImportError, AttributeError, KeyError, TypeError, ValueError, SyntaxError):
        return  # another pytest's internals, or a module it will report: workers rewrite


@pytest.fixture
def data_dir(tmp_path) -> Path:
    path = tmp_path / "data"
    path.mkdir()
    return path


@pytest.fixture(scope="session")
def migrated(tmp_path_factory) -> Path:
    """A database file the real migrations made, once per test process: each test's
    database starts as a copy of it (~1 ms) rather than running every migration again
    (~60 ms, most of a plain test's setup). tests/app/test_db.py runs the migrations on
    fresh and old files itself."""
    path = tmp_path_factory.mktemp("migrated") / "commonplace.db"
    database = dbmod.Database(f"sqlite:///{path}")
    upgrades.upgrade(database, path.parent / "backups")
    database.engine.dispose()  # closed: the WAL is checkpointed into the file
    assert not upgrades.pending_migrations(dbmod.Database(f"sqlite:///{path}"))
    return path


@pytest.fixture
def make_app(data_dir, migrated):
    def make(**config):
        settings = {"DATA_DIR": data_dir, "DATABASE_URL": f"sqlite:///{data_dir}/commonplace.db",
                    "AUTH_MODE": "dev", "OWNERS": [], "VIEWERS": [], "TIMEZONE": "UTC",
                    "TESTING": True}
        settings.update(config)
        path = sa.make_url(settings["DATABASE_URL"]).database
        if path and path != ":memory:" and not Path(path).exists():
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(migrated, path)
        app = create_app(settings)
        upgrades.upgrade(app.extensions["db"], data_dir / "backups")  # nothing pending
        return app

    return make


@pytest.fixture
def app(make_app):
    return make_app()


@pytest.fixture
def client(app):
    return app.test_client()


@pytest.fixture
def db(app):
    return app.extensions["db"]


@pytest.fixture
def served(make_app) -> Served:
    """Serve mode with an owner and a viewer, as `tailscale serve` deployments run."""
    app = make_app(AUTH_MODE="serve", OWNERS=[OWNER], VIEWERS=[VIEWER])
    return Served(app=app, db=app.extensions["db"], client=app.test_client())


@pytest.fixture
def live_server(data_dir):
    """The real thing: `commonplace up` (migrate + gunicorn) on a free loopback port."""
    with commonplace_up(data_dir) as base:
        yield base


@pytest.fixture(scope="module")
def module_server(tmp_path_factory) -> Iterator[tuple[str, Path]]:
    """`live_server` once for a whole module: (base URL, data directory). Starting `up`
    costs seconds of CPU, so a module whose tests only read what it serves, or each write
    rows of their own that no other test of the module reads, shares one."""
    data = tmp_path_factory.mktemp("server")
    with commonplace_up(data) as base:
        yield base, data
