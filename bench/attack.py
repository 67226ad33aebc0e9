"""Every attack of the second hardening round, against a real server this script starts on
loopback (`commonplace web`, serve mode, with an owner and a viewer), bounded in count and
time. One line per attack: what, the result, how long. Then the acceptance figures.

    .venv/bin/python bench/attack.py                      # full size (minutes; a quiet box)
    .venv/bin/python bench/attack.py --scale 0.1          # a tenth of every count and size

Nothing leaves this machine: TCP to 127.0.0.1 and the web's own unix socket (where it
believes serve's identity headers, as `tailscale serve` sends them). Everything it starts
(the server's process group, `commonplace` commands, the temporary directory) is gone when
it exits, also on an error.
"""

from __future__ import annotations

import argparse
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
import threading
import time
from pathlib import Path
from urllib.parse import quote

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app import create_app  # noqa: E402
from app.cli import migrate  # noqa: E402
from app.models import Token  # noqa: E402
from app.notebook import entries  # noqa: E402
from app.web.auth.identity import hash_token, new_token  # noqa: E402

OWNER, VIEWER, STRANGER = "owner@example.com", "viewer@example.com", "mallory@example.net"
SERVE = {"Host": "localhost", "X-Forwarded-Host": "notes.tail1234.ts.net",
         "X-Forwarded-Proto": "https", "X-Forwarded-For": "100.101.102.103"}
LIMIT = 30.0  # seconds any one request may take here before it counts as no answer
WORDS = "pipeline bubble gradient tensor shard collective bandwidth latency memory".split()


class Unix(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float = LIMIT):
        super().__init__("localhost", timeout=timeout)
        self.path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.path)


class Target:
    """The server, and every status it answered (for the 5xx count)."""

    def __init__(self, data_dir: Path, port: int, tokens: dict[str, str]):
        self.data_dir, self.port, self.tokens = data_dir, port, tokens
        self.socket = str(data_dir / "web.sock")
        self.statuses: list[int] = []
        self.lock = threading.Lock()

    def call(self, method: str, path: str, *, who: str | None = None, token: str | None = None,
             body=None, timeout: float = LIMIT, form: bool = False) -> tuple[int, bytes, float]:
        """(status, body, seconds); as `who` through serve's socket, or with a token over
        TCP. Status 0: no answer within `timeout`."""
        headers = {}
        if who is not None:
            conn = Unix(self.socket, timeout)
            headers = {**SERVE, "Tailscale-User-Login": who}
        else:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        if token is not None:
            headers["Authorization"] = f"Bearer {self.tokens[token]}"
        data = body
        if form:
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        if isinstance(body, (dict, list)):
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        start = time.perf_counter()
        try:
            conn.request(method, path, body=data, headers=headers)
            response = conn.getresponse()
            status, payload = response.status, response.read()
        except (OSError, http.client.HTTPException):
            status, payload = 0, b""
        finally:
            conn.close()
        with self.lock:
            self.statuses.append(status)
        return status, payload, time.perf_counter() - start


def line(what: str, result: str, seconds: float) -> None:
    print(f"{what:<58} {result:<44} {seconds:7.2f} s", flush=True)


# -- the server ------------------------------------------------------------------------------


def prepare(data_dir: Path, n_entries: int) -> dict[str, str]:
    app = create_app({"DATA_DIR": data_dir, "DATABASE_URL": f"sqlite:///{data_dir}/c.db",
                      "AUTH_MODE": "serve", "OWNERS": [OWNER], "TIMEZONE": "UTC"})
    migrate(app)
    secrets = {name: new_token() for name in ("owner", "runner", "runner-2")}
    with app.extensions["db"].write() as session:
        for name, secret in secrets.items():
            session.add(Token(name=name, role=name.split("-")[0], token_hash=hash_token(secret)))
        for i in range(n_entries):
            words = " ".join(WORDS[(i + k) % len(WORDS)] for k in range(30))
            entries.create(session, author=OWNER, date=f"2024-{1 + i % 12:02d}-{1 + i % 28:02d}",
                           title=f"Note {i} {WORDS[i % len(WORDS)]}", body=words, tags=[])
    app.extensions["db"].engine.dispose()
    return secrets


def server_env(data_dir: Path, port: int) -> dict[str, str]:
    return {**os.environ, "COMMONPLACE_DATA_DIR": str(data_dir),
            "COMMONPLACE_DATABASE_URL": f"sqlite:///{data_dir}/c.db",
            "COMMONPLACE_BIND": f"127.0.0.1:{port}", "COMMONPLACE_AUTH": "serve",
            "COMMONPLACE_OWNERS": OWNER, "COMMONPLACE_VIEWERS": VIEWER,
            "COMMONPLACE_SERVE_SOCKET": str(data_dir / "web.sock"),
            "COMMONPLACE_HOSTS": "notes.tail1234.ts.net", "COMMONPLACE_TIMEZONE": "UTC"}


def start(data_dir: Path, port: int) -> subprocess.Popen:
    with open(data_dir / "web.log", "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "app.cli", "web"], cwd=ROOT,
                                env=server_env(data_dir, port), stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        with contextlib.suppress(OSError):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/healthz")
            if conn.getresponse().status == 200:
                return proc
        time.sleep(0.2)
    stop(proc)
    raise RuntimeError(f"the server did not start; see {data_dir / 'web.log'}")


def stop(proc: subprocess.Popen) -> None:
    """The server's process group only (a session of its own)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


# -- floods ----------------------------------------------------------------------------------


def trickle(target: Target, path: str, length: int, headers: dict[str, str], rate: float,
            stop_at: float, answers: list) -> None:
    """A POST promising `length` bytes, sent at `rate` bytes a second; records how long the
    server took to answer (or None if it never did while we sent)."""
    start = time.perf_counter()
    try:
        if "Tailscale-User-Login" in headers:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(target.socket)
        else:
            sock = socket.create_connection(("127.0.0.1", target.port))
    except OSError:
        answers.append((0, None))
        return
    with sock:
        head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        sock.sendall(f"POST {path} HTTP/1.1\r\n{head}Content-Length: {length}\r\n\r\n".encode())
        piece = max(1, int(rate / 4))
        sent = 0
        while time.monotonic() < stop_at and sent < length:
            try:
                sock.sendall(b" " * min(piece, length - sent))
            except OSError:
                break
            sent += piece
            sock.settimeout(0.25)
            try:
                got = sock.recv(200)
            except TimeoutError:
                continue
            except OSError:
                got = b""
            status = int(got.split()[1]) if got.startswith(b"HTTP/1.1 ") else 0
            answers.append((status, time.perf_counter() - start))
            return
    answers.append((0, None))


def watch(target: Target, stop_at: float, worst: dict) -> None:
    """/healthz over TCP and the owner's home through serve, again and again: the worst."""
    while time.monotonic() < stop_at:
        for kind, call in (("healthz", lambda: target.call("GET", "/healthz")),
                           ("home", lambda: target.call("GET", "/", who=OWNER))):
            status, _, seconds = call()
            worst[kind] = max(worst.get(kind, 0.0), seconds if status == 200 else LIMIT)
        time.sleep(0.2)


def long_polls(target: Target, n: int, stop_at: float) -> list[threading.Thread]:
    def poll(token: str):
        target.call("POST", "/api/v1/runner/register", token=token, body={"labels": {}})
        while time.monotonic() < stop_at:
            status, _, _ = target.call("POST", "/api/v1/runner/lease", token=token,
                                       body={"wait": 30}, timeout=40)
            if status in (0, 429):
                time.sleep(1)
    return [threading.Thread(target=poll, args=("runner" if i % 2 else "runner-2",),
                             daemon=True) for i in range(n)]


def flood(target: Target, what: str, strangers: int, polls: int, seconds: float,
          path: str, headers: dict, length: int, rate: float) -> dict:
    stop_at = time.monotonic() + seconds
    answers: list = []
    worst: dict = {}
    threads = [threading.Thread(target=trickle, args=(target, path, length, headers, rate,
                                                      stop_at, answers), daemon=True)
               for _ in range(strangers)]
    threads += long_polls(target, polls, stop_at)
    threads.append(threading.Thread(target=watch, args=(target, stop_at, worst), daemon=True))
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=seconds + 45)
    answered = [t for _, t in answers if t is not None]
    statuses = sorted({s for s, _ in answers})
    line(what, f"answered {len(answered)}/{strangers} {statuses}, worst answer "
         f"{max(answered, default=0):.2f} s", time.perf_counter() - start)
    line(f"  meanwhile (+{polls} long polls)", f"/healthz worst {worst.get('healthz', 0):.2f} s, "
         f"owner / worst {worst.get('home', 0):.2f} s", seconds)
    return worst


# -- one request each ------------------------------------------------------------------------


def markdown(target: Target, scale: float) -> float:
    """Pathological bodies, each POSTed while the owner keeps writing small notes: the
    slowest of those small writes is how long the write lock was held."""
    n = lambda full: max(10, int(full * scale))  # noqa: E731
    bodies = {
        "headings": "".join(f"# h{i}\n" for i in range(n(40_000))),
        "admonitions": "!!! note\n" * n(50_000),
        "code spans": "`a " * n(400_000),
        "wiki links": " ".join(f"[[t{i}]]" for i in range(n(25_000))),
        "emphasis": "*_" * n(300_000),
        "nested quotes": ">" * 500 + " x",
    }
    worst_write = 0.0
    for name, body in bodies.items():
        stop_at = [False]
        writes: list[float] = []

        def small_writes(stop_at=stop_at, writes=writes, name=name):
            i = 0
            while not stop_at[0]:
                i += 1
                status, _, seconds = target.call("POST", "/api/v1/entries", token="owner",
                                                 body={"title": f"w{name}{i}", "body": "x"})
                writes.append(seconds if status == 201 else LIMIT)
                time.sleep(0.2)
        writer = threading.Thread(target=small_writes, daemon=True)
        writer.start()
        status, _, seconds = target.call("POST", "/api/v1/entries", token="owner",
                                         body={"title": f"md {name}", "body": body})
        stop_at[0] = True
        writer.join(timeout=LIMIT + 5)
        worst_write = max([worst_write, *writes])
        line(f"markdown: {name} ({len(body) // 1000} kB)",
             f"{status or 'no answer'}; slowest other write {max(writes, default=0):.2f} s",
             seconds)
    status, _, seconds = target.call("POST", "/preview", who=OWNER, form=True,
                                     body=b"body=" + quote(">" * 500 + " x").encode())
    line("markdown: 500 nested quotes via /preview", str(status or "no answer"), seconds)
    return worst_write


def searches(target: Target, scale: float) -> float:
    worst = 0.0
    for what, q in (("83 copies of a* OR'd", " OR ".join(["a*"] * 83)),
                    ("35 different prefixes OR'd", " OR ".join(f"{c}{d}*" for c in "abcdefg"
                                                               for d in "aeiou")),
                    ("4 one-letter prefixes", "a* b* c* d*"),
                    ("title:x", "title:pipeline")):
        status, _, seconds = target.call("GET", "/api/v1/search?q=" + quote(q), who=VIEWER)
        worst = max(worst, seconds)
        line(f"search: {what}", str(status or "no answer"), seconds)
    n = max(2, int(16 * scale))
    results: list = []

    def one():
        results.append(target.call("GET", "/api/v1/search?q=" + quote("p* OR b* OR t* OR s*"),
                                   who=VIEWER))
    threads = [threading.Thread(target=one, daemon=True) for _ in range(n)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    home = target.call("GET", "/", who=OWNER)
    for thread in threads:
        thread.join(timeout=LIMIT + 5)
    statuses = sorted({s for s, _, _ in results})
    slowest = max((t for _, _, t in results), default=0.0)
    worst = max(worst, slowest)
    line(f"search: {n} at once from one viewer", f"{statuses}, slowest {slowest:.2f} s, "
         f"owner / {home[2]:.2f} s", time.perf_counter() - start)
    return worst


def drafts(target: Target) -> None:
    start = time.perf_counter()
    _, made, _ = target.call("POST", "/api/v1/entries", token="owner",
                             body={"title": "Plan", "body": "secret draft words",
                                   "status": "draft"})
    made = json.loads(made)
    target.call("PUT", f"/api/v1/entries/{made['id']}", token="owner",
                body={"body": "public words", "status": "published",
                      "base_revision": made["revision"]})
    got = [target.call("GET", path, who=VIEWER)
           for path in (f"/api/v1/entries/{made['id']}/revisions/1",
                        f"/entries/{made['id']}/diff?a=1&b=2",
                        f"/entries/{made['id']}/history",
                        f"/api/v1/entries/{made['id']}/revisions")]
    leaked = sum(b"secret draft" in body for _, body, _ in got)
    line("drafts: viewer reads a draft revision, its diff, history",
         f"{[s for s, _, _ in got]}, draft text leaked {leaked}x", time.perf_counter() - start)


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


def events(target: Target, scale: float) -> None:
    """A run whose events file is large: trace.json and the run page, twice each."""
    target.call("POST", "/api/v1/runner/register", token="runner", body={"labels": {}})
    status, body, _ = target.call("POST", "/api/v1/runs", token="owner",
                                  body={"experiment": "pipeline", "params": {}})
    if status != 201:
        line("events: a big events file", f"could not queue a run ({status})", 0)
        return
    _, leased, _ = target.call("POST", "/api/v1/runner/lease", token="runner", body={"wait": 5})
    spec = json.loads(leased or b"{}").get("run") or {}
    size = int(7 * 1024 * 1024 * scale)
    rows, i = [], 0
    while sum(map(len, rows)) < size:
        rank, step = i % 4, i // 400
        rows.append(json.dumps({"rank": rank, "strategy": "gpipe", "step": step,
                                "kind": "forward", "t0": i * 1e-3, "t1": i * 1e-3 + 5e-4,
                                "mb": i % 8, "stage": rank}) + "\n")
        i += 1
    data = "".join(rows).encode()
    status, _, seconds = target.call(
        "PUT", f"/api/v1/runner/runs/{spec.get('id')}/artifacts/events.jsonl?epoch="
        f"{spec.get('epoch')}", token="runner", body=data, timeout=60)
    line(f"events: upload {len(data) // 1024} KiB of events", str(status), seconds)
    for path in (f"/api/v1/runs/{spec.get('id')}/trace.json", f"/runs/{spec.get('id')}"):
        first = target.call("GET", path, who=OWNER)
        second = target.call("GET", path, who=OWNER)
        what = "trace.json" if path.endswith(".json") else "the run page"
        line(f"events: {what} twice", f"{first[0]} then {second[0]}", first[2] + second[2])
        line("  the second view alone", "", second[2])


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=1.0,
                        help="fraction of every count, size and duration (default 1)")
    parser.add_argument("--entries", type=int, default=None,
                        help="notes in the notebook (default 23000 x scale)")
    args = parser.parse_args()
    scale = args.scale
    data_dir = Path(tempfile.mkdtemp(prefix="cp-attack-"))
    proc = None
    try:
        n_entries = args.entries if args.entries is not None else max(200, int(23_000 * scale))
        tokens = prepare(data_dir, n_entries)
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        proc = start(data_dir, port)
        target = Target(data_dir, port, tokens)
        print(f"attacks on a {n_entries}-note notebook at 127.0.0.1:{port} (scale {scale})")
        seconds = max(10.0, 35 * scale)
        stranger = {**SERVE, "Tailscale-User-Login": STRANGER,
                    "Content-Type": "application/x-www-form-urlencoded"}
        worst = flood(target, "slow bodies: 24 strangers, 60 kB at 1 B/s", 24, 20, seconds,
                      "/entries/new", stranger, 60_000, 1)
        runner = {"Host": "127.0.0.1", "Authorization": f"Bearer {tokens['runner']}",
                  "Content-Type": "application/json"}
        flood(target, "slow bodies: 20 runner-token registers at 9.5 KiB/s", 20, 0, seconds,
              "/api/v1/runner/register", runner, 1_000_000, 9.5 * 1024)
        write_lock = markdown(target, scale)
        worst_search = searches(target, scale)
        drafts(target)
        events(target, scale)
        smaller(target, data_dir)
        importing(data_dir, port)
        operations(target, data_dir)
        errors = sum(s >= 500 for s in target.statuses)
        print("\nacceptance (issue: with 24 slow-body strangers and 20 long polls, /healthz and "
              "the owner's home < 1 s; worst search < 500 ms; no pathological input holds the "
              "write lock > 1 s; no 5xx)")
        print(f"  /healthz worst {worst.get('healthz', 0):.2f} s, owner / worst "
              f"{worst.get('home', 0):.2f} s")
        print(f"  worst search {worst_search * 1000:.0f} ms")
        print(f"  slowest small write during a pathological save {write_lock:.2f} s")
        print(f"  5xx answers {errors} of {len(target.statuses)}")
    finally:
        if proc is not None:
            stop(proc)
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
