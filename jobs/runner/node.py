"""The runner's side of a run that spans hosts (a gang lease; the server's side is
app/journal/gangs.py, the protocol docs/RUNNER.md).

Every lease call offers this host as a node: the address the other hosts reach it at
(`--advertise`, default 127.0.0.1) and a rendezvous port free on it. When the server has
a gang run for it, the lease says which node this is and where node 0's rendezvous is;
the lab launches this host's share (`python -m jobs.lab run … --gang '{…}'`), torchrun
tags every line with its node and rank, and the agent ships its log by whole lines, so
the server can merge the nodes' logs into the run's one log. Only node 0 sends the
result (rank 0's result.json); each node sends its ranks' events under its own name.
"""

from __future__ import annotations

import json
import socket

from base.contract import EVENTS_FILE


def offer(address: str, port: int = 0) -> dict:
    """This host as a node: `port` 0 picks one that is free now (a fixed one suits a
    firewall that opens one port between the hosts)."""
    if not port:
        with socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET) as sock:
            sock.bind(("" if address not in ("127.0.0.1", "::1") else address, 0))
            port = sock.getsockname()[1]
    return {"address": address, "port": port}


def lab_args(gang: dict | None) -> list[str]:
    return ["--gang", json.dumps(gang)] if gang else []


def node_rank(gang: dict | None) -> int:
    return int(gang["node_rank"]) if gang else 0


def events_name(gang: dict | None) -> str:
    """events.jsonl (node 0, or a run on one host); events.node<k>.jsonl for node k."""
    rank = node_rank(gang)
    return EVENTS_FILE if rank == 0 else EVENTS_FILE.replace(".jsonl", f".node{rank}.jsonl")


def whole_lines(chunk: bytes, gang: dict | None, running: bool, limit: int) -> bytes:
    """What of `chunk` to send now: for a gang run still running, up to its last newline
    (the server appends each node's lines to one log, so a line must not be cut between
    two nodes' chunks); a line longer than `limit` goes as it is."""
    if not gang or not running or chunk.endswith(b"\n"):
        return chunk
    cut = chunk.rfind(b"\n")
    return chunk[:cut + 1] if cut >= 0 else (chunk if len(chunk) >= limit else b"")
