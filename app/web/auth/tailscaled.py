"""Asking tailscaled who is at the other end of a connection (whois mode).

tailscaled's LocalAPI answers over its unix socket: GET /localapi/v0/whois?addr=ip:port
gives the node and its user. An answer we cannot read, or no answer, raises
WhoisUnavailable and the caller lets nobody in. Answers are cached per peer IP for a few
seconds, because a page load is a dozen requests.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from dataclasses import dataclass
from urllib.parse import quote

from app.config import ascii_lower

LOCALAPI_HOST = "local-tailscaled.sock"  # apitype.LocalAPIHost: the Host tailscaled expects
TAGGED_DEVICES = "tagged-devices"  # UserProfile.LoginName of every tagged node
WHOIS_TIMEOUT = 2.0


class WhoisUnavailable(Exception):
    """tailscaled could not be asked, or gave an answer we cannot read."""


def clean_name(value: str) -> str:
    """A display name as we show it: printable, at most 200 characters."""
    return "".join(ch for ch in value if ch.isprintable())[:200].strip()



@dataclass(frozen=True)
class Peer:
    """What tailscaled says about the other end of a connection."""

    login: str  # UserProfile.LoginName, A-Z lower-cased (app.config.ascii_lower)
    name: str  # UserProfile.DisplayName
    node: str  # the device's MagicDNS name
    tags: tuple[str, ...]  # Node.Tags: a tagged node acts as its tags, not as a person
    addresses: tuple[str, ...] = ()  # Node.Addresses without their /32 or /128

    @property
    def tagged(self) -> bool:
        return bool(self.tags) or self.login == TAGGED_DEVICES


def parse_whois(doc: object) -> Peer:
    """Read an apitype.WhoIsResponse ({"Node": {...}, "UserProfile": {...}, "CapMap": ...})."""
    if not isinstance(doc, dict):
        raise WhoisUnavailable("whois answer is not a JSON object")
    node, profile = doc.get("Node"), doc.get("UserProfile")
    # "In successful whois responses, Node and UserProfile are never nil" (apitype.go).
    if not isinstance(node, dict) or not isinstance(profile, dict):
        raise WhoisUnavailable("whois answer lacks Node or UserProfile")
    login, tags = profile.get("LoginName"), node.get("Tags") or []
    addresses = node.get("Addresses") or []
    if not isinstance(login, str) or not isinstance(tags, list):
        raise WhoisUnavailable("whois answer has no LoginName")
    if not isinstance(addresses, list):
        raise WhoisUnavailable("whois answer has unreadable Node.Addresses")
    node_name = node.get("ComputedName") or str(node.get("Name") or "").rstrip(".")
    display = clean_name(str(profile.get("DisplayName") or ""))
    # As tailscaled gives it: str.strip() would turn "owner@x\u00a0" (a trailing no-break
    # space, any Unicode space or a newline) into the owner.
    return Peer(login=ascii_lower(login), name=display,
                node=clean_name(str(node_name)), tags=tuple(str(t) for t in tags),
                addresses=tuple(str(a).split("/")[0] for a in addresses))


class _UnixHTTPConnection(http.client.HTTPConnection):
    """HTTP over tailscaled's unix socket. The host name is what tailscaled expects in the
    Host header; the socket path is where we actually connect."""

    def __init__(self, socket_path: str, timeout: float):
        super().__init__(LOCALAPI_HOST, timeout=timeout)
        self.socket_path = socket_path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.socket_path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


def localapi_whois(socket_path: str, addr: str, timeout: float = WHOIS_TIMEOUT) -> Peer | None:
    """Ask tailscaled who is at `addr` (ip:port or ip): GET /localapi/v0/whois?addr=...
    None means "not a tailnet peer" (tailscaled's 404 "no match for IP:port"); anything else
    that is not a readable 200 raises WhoisUnavailable, and the caller lets nobody in."""
    conn = _UnixHTTPConnection(socket_path, timeout)
    try:
        conn.request("GET", "/localapi/v0/whois?addr=" + quote(addr, safe=""))
        response = conn.getresponse()
        body = response.read(1 << 20)
    except (OSError, http.client.HTTPException) as exc:
        raise WhoisUnavailable(f"tailscaled ({socket_path}) did not answer: {exc}") from exc
    finally:
        conn.close()
    if response.status == 404:
        return None
    if response.status != 200:
        text = body[:200].decode("utf-8", "replace").strip()
        raise WhoisUnavailable(f"tailscaled answered {response.status}: {text}")
    try:
        return parse_whois(json.loads(body))
    except ValueError as exc:
        raise WhoisUnavailable(f"unreadable whois answer: {exc}") from exc


# golink's seam: the one function that asks tailscaled, a module variable so tests (or a
# platform whose LocalAPI is not a unix socket) can put another in its place.
whois = localapi_whois


class WhoisCache:
    """Recent answers by peer IP (one IP is one tailnet node), for a few seconds: a page
    load is a dozen requests, and each would otherwise ask tailscaled again. Only positive
    answers are kept; a refusal or an unanswered question is asked again next time."""

    def __init__(self, max_entries: int = 512):
        self.max_entries = max_entries
        self._lock = threading.Lock()
        self._items: dict[tuple[str, str], tuple[float, Peer]] = {}

    def lookup(self, socket_path: str, ip: str, addr: str, ttl: float) -> Peer | None:
        key, now = (socket_path, ip), time.monotonic()
        with self._lock:
            hit = self._items.get(key)
            if hit and hit[0] > now:
                return hit[1]
        peer = whois(socket_path, addr)
        if peer is not None and ttl > 0:
            with self._lock:
                if len(self._items) >= self.max_entries:
                    self._items = {k: v for k, v in self._items.items() if v[0] > now}
                    while len(self._items) >= self.max_entries:
                        self._items.pop(next(iter(self._items)))
                self._items[key] = (now + ttl, peer)
        return peer

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


whois_cache = WhoisCache()


