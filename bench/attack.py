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
import shutil
import socket
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.attacks.floods import flood  # noqa: E402
from bench.attacks.hostile import drafts, events, markdown, searches  # noqa: E402
from bench.attacks.operations import importing, operations, smaller  # noqa: E402
from bench.attacks.target import SERVE, STRANGER, Target, prepare, start  # noqa: E402
from bench.serving import stop_server  # noqa: E402


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
            stop_server(proc)
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
