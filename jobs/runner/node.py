"""The runner's side of a run that spans hosts (a gang lease; the server's side is
app/journal/gangs.py, the protocol docs/RUNNER.md).

Every lease call offers this host as a node: the address the other hosts reach it at
(`--advertise`, default 127.0.0.1) and a rendezvous port on it that it holds (a
Reservation: bound and listening from the first offer on, so that no other process can
take it before a run uses it; node 0's launcher serves the rendezvous on that very
socket, its descriptor passed down, and the agent then reserves afresh). When the server has
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

RDZV_FD_ENV = "COMMONPLACE_RDZV_FD"  # the lab's name for it (jobs/lab/launcher/launch.py)


class Reservation:
    """This host's rendezvous port, held open: `port` 0 takes one the kernel picks, a
    fixed one suits a firewall that opens one port between the hosts."""

    def __init__(self, address: str, port: int = 0) -> None:
        self.address, self.fixed = address, port
        self.sock: socket.socket | None = None

    def _socket(self) -> socket.socket:
        if self.sock is None:
            sock = socket.socket(socket.AF_INET6 if ":" in self.address else socket.AF_INET)
            # a fixed port is taken again while the last run's connections linger
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            local = self.address if self.address in ("127.0.0.1", "::1") else ""
            sock.bind((local, self.fixed))
            sock.listen(128)  # a node that connects early waits in the backlog
            self.sock = sock
        return self.sock

    def offer(self) -> dict:
        return {"address": self.address, "port": self._socket().getsockname()[1]}

    def handed(self, gang: dict | None) -> dict:
        """What a run's launcher needs to serve its rendezvous here (node 0 of a gang):
        {"env": ..., "pass_fds": ...} for Popen; nothing for any other run."""
        if gang is None or node_rank(gang) != 0 or self.sock is None:
            return {}
        fd = self.sock.fileno()
        return {"env": {RDZV_FD_ENV: str(fd)}, "pass_fds": (fd,)}

    def renew(self) -> None:
        """After a run that used the socket: the next run gets a fresh one."""
        self.close()

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None


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
