"""What the journal's background processes cost while nothing happens.

    .venv/bin/python bench/idle.py [--seconds 60]

Starts `commonplace up` (web + scheduler + local runner) on a free loopback port in a
fresh data directory, lets it settle, then samples each process's CPU time (utime+stime
from /proc) over the window and its resident memory. The baseline in the same run is an
idle `python -c "import time; time.sleep(…)"` — the floor any Python process pays.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TICK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def children(pid: int) -> list[int]:
    out = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(proc.name))
            except (OSError, ValueError):
                pass
    return out


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=60)
    args = parser.parse_args()
    data = Path(tempfile.mkdtemp(prefix="cp-idle-"))
    port = free_port()
    env = {**os.environ, "COMMONPLACE_DATA_DIR": str(data), "COMMONPLACE_AUTH": "dev",
           "COMMONPLACE_BIND": f"127.0.0.1:{port}", "COMMONPLACE_TIMEZONE": "UTC"}
    up = subprocess.Popen([sys.executable, "-m", "app.cli", "up"], cwd=ROOT, env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    baseline = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    try:
        time.sleep(15)  # migrations, imports, registration
        procs = {"baseline (idle python)": baseline.pid}
        for pid in children(up.pid):
            line = cmdline(pid)
            name = ("scheduler" if " scheduler" in line else "runner" if " runner" in line
                    else "web (gunicorn master)" if "gunicorn" in line else line[:40])
            procs[name] = pid
            if "gunicorn" in line:
                for i, worker in enumerate(children(pid)):
                    procs[f"web worker {i + 1}"] = worker
        before = {name: cpu_seconds(pid) for name, pid in procs.items()}
        time.sleep(args.seconds)
        print(f"idle for {args.seconds:.0f}s after start-up "
              f"(CPU % of one core; resident memory)")
        for name, pid in procs.items():
            used = cpu_seconds(pid) - before[name]
            print(f"  {name:<24} {100 * used / args.seconds:6.2f}% CPU  {rss_mb(pid):7.1f} MB")
    finally:
        baseline.kill()
        up.send_signal(signal.SIGTERM)
        try:
            up.wait(timeout=30)
        except subprocess.TimeoutExpired:
            up.kill()


if __name__ == "__main__":
    main()
