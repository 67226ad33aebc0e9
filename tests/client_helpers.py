"""What the terminal client's tests share: `cpl` run as a real subprocess (in a pipe or on a
pseudo-terminal), each test with its own config and state folders, against the real
processes of tests/journal_harness.py's `Journal` (gunicorn, the scheduler, a runner).

Import it as `from tests.client_helpers import ...`.
"""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from queue import Empty, Queue

from tests.helpers import ROOT, interruptible

CPL = [sys.executable, "-m", "cpl"]
# Settings of the person running the tests that would change what cpl does.
NOT_INHERITED = ("NO_COLOR", "CLICOLOR_FORCE", "FORCE_COLOR", "COMMONPLACE_TOKEN",
                 "COMMONPLACE_SERVER", "COMMONPLACE_EDITOR", "VISUAL", "EDITOR", "COLUMNS",
                 "LINES", "XDG_CONFIG_HOME", "XDG_STATE_HOME", "XDG_RUNTIME_DIR", "TERM")


@dataclass
class Done:
    rc: int
    out: str
    err: str

    def json(self):
        return json.loads(self.out)


class Terminal:
    """`cpl` for one test: its own XDG config and state folders, never the real keyring,
    pointed at `server` through COMMONPLACE_SERVER."""

    def __init__(self, home: Path, server: str):
        self.home = home
        self.server = server
        self.env = {k: v for k, v in os.environ.items() if k not in NOT_INHERITED}
        self.env.update({
            "COMMONPLACE_SERVER": server, "XDG_CONFIG_HOME": str(home / "config"),
            "XDG_STATE_HOME": str(home / "state"), "XDG_RUNTIME_DIR": str(home / "run"),
            # A keyring that always fails: the tests never touch the person's keyring.
            "PYTHON_KEYRING_BACKEND": "keyring.backends.fail.Keyring",
            "EDITOR": "false",  # a test that means to edit names its editor
        })
        (home / "run").mkdir(parents=True, exist_ok=True)

    @property
    def state(self) -> Path:
        return self.home / "state" / "commonplace"

    @property
    def config_file(self) -> Path:
        return self.home / "config" / "commonplace" / "config.toml"

    def __call__(self, *args: str, stdin=None, input: str | None = None,
                 env: dict | None = None, timeout: float = 90) -> Done:
        done = subprocess.run([*CPL, *args], cwd=ROOT, env={**self.env, **(env or {})},
                              input=input, stdin=stdin if input is None else None,
                              capture_output=True, text=True, timeout=timeout)
        return Done(done.returncode, done.stdout, done.stderr)

    def popen(self, *args: str, env: dict | None = None) -> subprocess.Popen:
        """cpl as started from a terminal, where Ctrl-C (SIGINT) interrupts."""
        return subprocess.Popen([*CPL, *args], cwd=ROOT, env={**self.env, **(env or {})},
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True,
                                preexec_fn=interruptible)

    def on_pty(self, *args: str, env: dict | None = None, timeout: float = 90) -> Done:
        """Run cpl with a pseudo-terminal as stdout and stderr (as in a terminal window,
        100 columns); `out` is everything it wrote, escape codes and all."""
        leader, follower = pty.openpty()
        proc = subprocess.Popen([*CPL, *args], cwd=ROOT, stdin=subprocess.DEVNULL,
                                stdout=follower, stderr=follower, close_fds=True,
                                env={**self.env, "TERM": "xterm-256color", "COLUMNS": "100",
                                     "LINES": "30", **(env or {})})
        os.close(follower)
        chunks, deadline = [], time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                ready, _, _ = select.select([leader], [], [], 0.5)
                if ready:
                    try:
                        data = os.read(leader, 65536)
                    except OSError:  # EIO: the child closed the terminal
                        break
                    if not data:
                        break
                    chunks.append(data)
                elif proc.poll() is not None:
                    break
            rc = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        finally:
            os.close(leader)
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=5)
        return Done(rc, b"".join(chunks).decode("utf-8", "replace"), "")


def lines_of(proc: subprocess.Popen) -> Queue:
    """The lines a process prints on stdout, as they come (read by a thread, so a test can
    wait for one with a deadline)."""
    found: Queue = Queue()

    def read():
        for line in proc.stdout:
            found.put(line)

    threading.Thread(target=read, daemon=True).start()
    return found


def wait_line(found: Queue, needle: str, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        try:
            line = found.get(timeout=0.2)
        except Empty:
            continue
        seen.append(line)
        if needle in line:
            return line
    raise AssertionError(f"no line with {needle!r} within {timeout}s; saw {seen}")


def editor(tmp: Path, name: str, code: str) -> str:
    """An $EDITOR: a Python script that edits the file it is given (sys.argv[1]) as `code`
    says; `text` holds the buffer and what it is set to is written back."""
    script = tmp / f"{name}.py"
    script.write_text("import sys\npath = sys.argv[1]\ntext = open(path).read()\n" + code +
                      "\nopen(path, 'w').write(text)\n")
    return f"{sys.executable} {script}"
