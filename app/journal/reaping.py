"""When the reaper may reap: only while a runner could have renewed its lease.

Runners renew their leases through the web, and the web writes them to the database: while
the web does not answer, or the database cannot be written, a lease running out says
nothing about its runner. So the reaper waits, and when both work again every active lease
gets one TTL from then (a runner that kept its job going through the outage reports it;
one that died is LOST one TTL later).

The standard library only: the scheduler's long-lived clock (clock.py) keeps this state
between its reaps, which it hands to a child; a Scheduler (scheduler.py) keeps it when it
reaps itself.
"""

from __future__ import annotations

import datetime as dt
import logging
import urllib.request
from collections.abc import Callable

log = logging.getLogger("commonplace.scheduler")
# The exit status of the scheduler's `reap` child that found the database locked by another
# writer (sysexits' EX_TEMPFAIL): how it tells the clock.
LOCKED = 75


class WebWatch:
    """Is the web up? The scheduler asks the web's /healthz at COMMONPLACE_BIND. A web it
    never reached (another host, a unix socket) is "unknown" and leases are reaped as they
    run out."""

    def __init__(self, bind: str, timeout_s: float = 3.0):
        self.url = health_url(bind)
        self.timeout_s = timeout_s
        self.seen_up = False
        self.down_since: dt.datetime | None = None  # naive UTC: an outage the reaper waits out

    def state(self) -> str:
        """"up", "down" (it answered before and does not now) or "unknown"."""
        if self.url is None:
            return "unknown"
        try:
            with urllib.request.urlopen(self.url, timeout=self.timeout_s) as response:
                up = response.status == 200
        except (OSError, ValueError):
            up = False
        if up:
            if not self.seen_up:
                log.info("the web at %s answers", self.url)
            self.seen_up = True
            return "up"
        return "down" if self.seen_up else "unknown"

    def first_look(self) -> None:
        """Say at start what the reaper knows of the web. Started together (`up`), the
        scheduler usually looks before the web answers: that is said as what it is, not as
        a web gone missing, and the web's first answer is logged when it comes."""
        if self.url is None:
            log.info("the web is not reachable from here: leases are reaped as they run out")
        elif self.state() != "up":
            log.info("the web at %s does not answer yet (still starting?): leases are reaped "
                     "as they run out until it does", self.url)

    def reap(self, reap: Callable[[bool], bool]) -> None:
        """Reap unless the web is down: `reap(amnesty)` gives every active lease one TTL
        first when asked (after an outage), reaps, and says False when the database was
        locked by another writer (nothing reaped)."""
        if self.state() == "down":
            self._outage(f"the web ({self.url}) does not answer")
            return
        if not reap(self.down_since is not None):
            self._outage("the database is locked by another writer")
            return
        if self.down_since is not None:
            outage = (_utcnow() - self.down_since).total_seconds()
            self.down_since = None
            log.warning("the web can renew leases again after %.0fs: every active lease got "
                        "one TTL from then", outage)

    def _outage(self, why: str) -> None:
        if self.down_since is None:
            self.down_since = _utcnow()
            log.warning("%s: leases are not reaped until it works again", why)


def health_url(bind: str) -> str | None:
    if not bind or bind.startswith("unix:") or ":" not in bind:
        return None
    host, _, port = bind.rpartition(":")
    host = host.strip("[]")
    if host in ("", "0.0.0.0"):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    return f"http://{f'[{host}]' if ':' in host else host}:{port}/healthz"


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)
