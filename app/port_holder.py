"""Which addresses the web may listen on (loopback, unless told otherwise), whether its TCP
address is free, and if not, who holds it. Without the second check a busy port made
`commonplace up` announce a server that was someone else's: the scheduler talked to that
one, the runner got 401s, and gunicorn gave up seconds later without a hint. Checked by
the CLI before the web starts, so nothing here imports the web (docs/SECURITY.md is the
threat model).
"""

from __future__ import annotations

import errno
import functools
import ipaddress
import os
import re
import socket
from pathlib import Path

LISTEN = "0A"  # the LISTEN state in /proc/net/tcp


def bind_problem(bind: str, mode: str, allow_non_loopback: bool) -> str | None:
    """Why the web must not listen on `bind`, or None. Loopback is the default because
    then `tailscale serve` is the only way in from the network."""
    if bind.startswith("unix:"):
        return None
    host = bind.rsplit(":", 1)[0] if ":" in bind else bind
    host = host.strip("[]")
    if host == "localhost" or is_loopback(host):
        return None
    if mode == "dev":
        return (f"refusing to listen on {bind} in dev mode: dev mode makes a loopback "
                "connection the owner and is meant for one laptop. Set COMMONPLACE_OWNERS "
                "and COMMONPLACE_AUTH=serve or whois to put the notebook on a network.")
    if not allow_non_loopback:
        return (f"refusing to listen on {bind or 'every address'}: that is not a loopback "
                "address, so every device that can reach it could connect directly instead "
                "of through `tailscale serve`. Keep COMMONPLACE_BIND=127.0.0.1:8000 and run "
                "`tailscale serve --bg unix:<COMMONPLACE_SERVE_SOCKET>`; or, to bind the "
                "tailnet address itself "
                "(COMMONPLACE_AUTH=whois), pass --allow-non-loopback.")
    return None


@functools.lru_cache(maxsize=1024)  # asked on every request, of the same few peers
def ip_of(value: str | None) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """An address as a dual-stack socket may write it ("[::ffff:100.64.0.1]", "fe80::1%lo")
    as the address it is, or None if it is not one."""
    try:
        ip = ipaddress.ip_address((value or "").strip("[]").split("%")[0])
    except ValueError:
        return None
    return getattr(ip, "ipv4_mapped", None) or ip


def is_loopback(addr: str | None) -> bool:
    ip = ip_of(addr)
    return ip is not None and ip.is_loopback


def port_problem(bind: str) -> str | None:
    """Why nothing can listen on `bind` (host:port) now, naming what holds it; or None."""
    if bind.startswith("unix:"):
        return None
    host, colon, port_text = bind.rpartition(":")
    # Without a port gunicorn would take 8000 (whoever holds it), and `up` would point its
    # runner at the host's name as if it were one.
    if not colon or not re.fullmatch(r"[0-9]{1,5}", port_text) \
            or not 1 <= int(port_text) <= 65535:
        return (f"COMMONPLACE_BIND={bind} does not end in a port number from 1 to 65535: "
                "give host:port, e.g. 127.0.0.1:8000")
    host, port = host.strip("[]") or "0.0.0.0", int(port_text)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        # as gunicorn binds: a port whose last connections are in TIME_WAIT is free
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                return f"cannot listen on {bind}: {exc.strerror}"
            return (f"port {port} is already in use, by {holder(port)}. Stop that, or set "
                    f"COMMONPLACE_BIND to a free address (e.g. {host}:{port + 1})")
    return None


def holder(port: int) -> str:
    """The process listening on TCP `port`, as far as /proc shows it (a process of another
    user's hides its sockets)."""
    inodes = _listening_inodes(port)
    for pid_dir in Path("/proc").glob("[0-9]*"):
        try:
            fds = list((pid_dir / "fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:[") and target[8:-1] in inodes:
                return f"process {pid_dir.name} ({_command(pid_dir)})"
    return "a process this user cannot see (another user's, or another container's)"


def _listening_inodes(port: int) -> set[str]:
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == LISTEN and int(fields[1].rsplit(":", 1)[1],
                                                                 16) == port:
                found.add(fields[9])
    return found


def _command(pid_dir: Path) -> str:
    try:
        raw = (pid_dir / "cmdline").read_bytes()
    except OSError:
        return "?"
    command = raw.replace(b"\0", b" ").decode("utf-8", "replace").strip()
    return command[:120] or "?"
