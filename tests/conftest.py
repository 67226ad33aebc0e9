"""Shared fixtures: a real SQLite file in a temporary data directory, migrated with the real
migrations, and the app built on it. Dev mode (loopback is the owner) unless a test says
otherwise."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from app import create_app
from app import db as dbmod

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def data_dir(tmp_path) -> Path:
    path = tmp_path / "data"
    path.mkdir()
    return path


@pytest.fixture
def make_app(data_dir):
    def make(**config):
        settings = {"DATA_DIR": data_dir, "DATABASE_URL": f"sqlite:///{data_dir}/commonplace.db",
                    "AUTH_MODE": "dev", "OWNERS": [], "VIEWERS": [], "TIMEZONE": "UTC",
                    "TESTING": True}
        settings.update(config)
        app = create_app(settings)
        dbmod.upgrade(app.extensions["db"], data_dir / "backups")
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


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_http(url: str, timeout: float = 30.0, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} before answering")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise TimeoutError(f"{url} did not answer within {timeout}s")


def stop_process(proc: subprocess.Popen) -> None:
    """End a process we started (and only it), politely first."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


@pytest.fixture
def live_server(data_dir):
    """The real thing: `commonplace up` (migrate + gunicorn) on a free loopback port."""
    port = free_port()
    env = {**os.environ, "COMMONPLACE_DATA_DIR": str(data_dir),
           "COMMONPLACE_BIND": f"127.0.0.1:{port}", "COMMONPLACE_AUTH": "dev",
           "COMMONPLACE_TIMEZONE": "UTC"}
    env.pop("COMMONPLACE_DATABASE_URL", None)
    log = open(data_dir / "server.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", "up"], cwd=ROOT, env=env,
                            stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for_http(base + "/healthz", proc=proc)
        yield base
    finally:
        stop_process(proc)
        log.close()
