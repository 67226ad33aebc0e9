"""The smaller findings (an encoded token in the log, owner logins with odd spaces, file
modes, a minutely schedule), an import of hostile files, and the operations a new user
meets (a busy port, the control socket, Ctrl-C on `up`, a run no runner can take)."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.attacks.target import OWNER, Target, line, server_env
from bench.serving import ROOT


def smaller(target: Target, data_dir: Path) -> None:
    feed = target.tokens["owner"]
    encoded = "".join(f"%{b:02X}" for b in feed.encode())
    status, _, seconds = target.call("GET", f"/api/v1/entries?%74oken={encoded}")
    time.sleep(1)
    logged = encoded in (data_dir / "web.log").read_text()
    line("log: ?%74oken=<%-encoded token>", f"{status}; in the log as is: {logged}", seconds)
    for name, login in (("trailing NBSP", f"=?utf-8?q?{OWNER}=C2=A0?="),
                        ("ideographic space", f"=?utf-8?q?{OWNER}=E3=80=80?="),
                        ("leading em space", f"=?utf-8?q?=E2=80=83{OWNER}?=")):
        status, _, seconds = target.call("GET", "/", who=login)
        line(f"login: owner with a {name}", str(status), seconds)
    modes = {p.name: oct(stat.S_IMODE(p.stat().st_mode))
             for p in (data_dir, data_dir / "c.db") if p.exists()}
    line("files: data folder and database modes", str(modes), 0)
    status, body, seconds = target.call("POST", "/api/v1/schedules", token="owner", body={
        "experiment": "collectives", "cron": "* * * * *", "timezone": "UTC"})
    message = json.loads(body or b"{}").get("error", {}).get("message", "")
    line("schedule: * * * * *", f"{status} {message[-38:]!r}", seconds)


def operations(target: Target, data_dir: Path) -> None:
    start = time.perf_counter()
    env = {**server_env(data_dir, target.port), "COMMONPLACE_AUTH": "dev"}
    env.pop("COMMONPLACE_OWNERS")
    done = subprocess.run([sys.executable, "-m", "app.cli", "up"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    said = (done.stderr.strip().splitlines() or [""])[-1]
    line("ops: `up` on the web's own busy port", f"rc {done.returncode}: {said[-34:]!r}",
         time.perf_counter() - start)
    line("ops: control socket in the data folder", str((data_dir / "gunicorn.ctl").exists()), 0)
    other = Path(tempfile.mkdtemp(prefix="cp-attack-up-"))
    try:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        env = {**os.environ, "COMMONPLACE_DATA_DIR": str(other), "COMMONPLACE_AUTH": "dev",
               "COMMONPLACE_BIND": f"127.0.0.1:{port}", "COMMONPLACE_WEB_WORKERS": "1"}
        up = subprocess.Popen([sys.executable, "-m", "app.cli", "up"], cwd=ROOT, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
                conn.request("GET", "/healthz")
                if conn.getresponse().status == 200:
                    break
            time.sleep(0.3)
        time.sleep(3)  # the runner is inside a long poll
        start = time.perf_counter()
        os.killpg(up.pid, signal.SIGINT)
        try:
            up.wait(timeout=30)
            result = f"rc {up.returncode}"
        except subprocess.TimeoutExpired:
            os.killpg(up.pid, signal.SIGKILL)
            result = "still running after 30 s (killed)"
        line("ops: Ctrl-C on `up`", result, time.perf_counter() - start)
    finally:
        shutil.rmtree(other, ignore_errors=True)
    target.call("POST", "/api/v1/runner/register", token="runner-2",
                body={"labels": {"gpu_count": 0}})
    status, body, seconds = target.call("POST", "/api/v1/runs", token="owner", body={
        "experiment": "gemm_roofline", "params": {"device": "cuda"}})
    line("ops: POST /api/v1/runs no runner can take", f"{status}", seconds)


def importing(data_dir: Path, port: int) -> None:
    folder = data_dir / "import"
    folder.mkdir()
    (folder / "2024-02-02-good.md").write_text("---\ntitle: Good\n---\nfine\n")
    os.mkfifo(folder / "2024-02-01-fifo.md")
    alias = "a: &a [x,x,x,x,x,x,x,x,x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{','.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8))
    (folder / "2024-02-03-bomb.md").write_text(f"---\n{alias}title: *i\n---\nbody\n")
    env = server_env(data_dir, port)

    def limit_memory():  # the alias bomb took 3 GB: keep it from taking the machine
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
    start = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, "-m", "app.cli", "import", str(folder)], cwd=ROOT,
                              env=env, capture_output=True, text=True, timeout=30,
                              preexec_fn=limit_memory)
        result = f"rc {done.returncode}: {(done.stdout + done.stderr).strip()[-60:]!r}"
    except subprocess.TimeoutExpired:
        result = "still running after 30 s (stopped)"
    line("import: a FIFO, a YAML alias bomb and a good file", result, time.perf_counter() - start)
