"""How the runner waits for a server that does not answer: quietly, retrying sooner at first
and less often later, and saying so in plain words only once the silence has lasted long
enough to be a problem rather than a server that is still starting.

`commonplace up` starts the runner beside the web, and on a loaded machine the web may
take well over ten seconds to listen; a runner on another host may be started before the
server. Neither is worth a warning. A server that stays silent for `patience_s` is.
"""

from __future__ import annotations

import logging
import time

# The first retry comes soon (a web starting beside us is usually up within seconds), each
# wait after it doubles, and none is longer than MOST_S, so a server that comes back is
# found again within that.
FIRST_S = 0.5
MOST_S = 10.0
# How long a server may stay silent before the runner says so.
PATIENCE_S = 60.0


def plainly(reason: str) -> str:
    """Why a call got no answer, in a user's words rather than urllib's."""
    low = reason.lower()
    if "refused" in low:
        return "nothing is listening there"
    if "timed out" in low or "timeout" in low:
        return "it did not answer in time"
    if "name or service not known" in low or "nodename nor servname" in low \
            or "temporary failure in name resolution" in low:
        return "that host name is not known"
    if reason[:3].isdigit() and reason[:1] == "5":
        return f"it answered with a server error ({reason[:3]})"
    return reason


class Silence:
    """One stretch of the server not answering: when it began, the next wait, and whether
    the user has been told."""

    def __init__(self, server: str, log: logging.Logger, patience_s: float = PATIENCE_S):
        self.server = server
        self.log = log
        self.patience_s = patience_s
        self.began: float | None = None
        self.wait_s = FIRST_S
        self.told = False

    def failed(self, reason: str) -> float:
        """Note one call that got no answer; return how long to wait before the next."""
        now = time.monotonic()
        if self.began is None:
            self.began = now
            self.log.info("waiting for the server at %s (%s); retrying quietly",
                          self.server, plainly(reason))
        elif not self.told and now - self.began >= self.patience_s:
            self.told = True
            self.log.warning(
                "the server at %s has not answered for %.0f s (%s). Is the web running, "
                "and is this the right address? The runner keeps trying every %.0f s at most.",
                self.server, now - self.began, plainly(reason), MOST_S)
        else:
            self.log.debug("still no answer from %s (%s); retrying in %.1f s",
                           self.server, reason, self.wait_s)
        wait, self.wait_s = self.wait_s, min(self.wait_s * 2, MOST_S)
        return wait

    def answered(self) -> None:
        """The server answered: the silence is over (and said so if the user was told)."""
        if self.told:
            self.log.info("the server at %s answers again after %.0f s", self.server,
                          time.monotonic() - self.began)
        self.began, self.wait_s, self.told = None, FIRST_S, False
