"""The runner's HTTP client: every call to the server goes through `Client.call`, and
every way it can fail is one of three exceptions the agent acts on differently."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass

VERSION = "1"


class Stale(Exception):
    """The server no longer considers this lease ours: stop the job, report nothing."""


class Unreachable(Exception):
    """No answer (network, 5xx): keep going and try again later."""


class Busy(Unreachable):
    """429: the server has enough long polls open; ask again after `retry_after` s."""

    def __init__(self, message: str, retry_after: float):
        super().__init__(message)
        self.retry_after = retry_after


class Refused(Exception):
    """A 4xx (other than a stale lease): our request was wrong as sent."""

    def __init__(self, message: str, code: str = "", details: dict | None = None):
        super().__init__(message)
        self.code = code
        self.details = details or {}


@dataclass
class Client:
    server: str
    token: str
    timeout: float = 40.0

    def call(self, method: str, path: str, body=None, *, raw: bytes | None = None,
             content_type: str = "application/json") -> dict | None:
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None
                                            else None)
        request = urllib.request.Request(
            self.server.rstrip("/") + path, data=data, method=method,
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": content_type,
                     "User-Agent": f"commonplace-runner/{VERSION}"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                payload = response.read()
                return json.loads(payload) if payload else None
        except urllib.error.HTTPError as exc:
            payload = exc.read()[:4000]
            detail = payload[:500].decode("utf-8", "replace")
            if exc.code >= 500:
                raise Unreachable(f"{exc.code}: {detail}") from None
            if exc.code == 429:
                try:
                    wait = min(60.0, max(1.0, float(exc.headers.get("Retry-After") or 5)))
                except ValueError:
                    wait = 5.0
                raise Busy(f"429: {detail}", wait) from None
            try:
                error = json.loads(payload).get("error", {})
            except (ValueError, AttributeError):
                error = {}
            # Only the server's word that the lease is no longer ours stops a job; any
            # other refusal (a log gap, a bad state) is handled where it happens.
            if exc.code == 409 and error.get("code") == "stale_lease":
                raise Stale(detail) from None
            raise Refused(f"{exc.code}: {detail}", error.get("code", ""), error) from None
        except (OSError, ValueError) as exc:  # URLError, timeouts, resets, bad JSON
            raise Unreachable(str(exc)) from None
