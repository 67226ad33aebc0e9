"""Every HTTP call `cpl` makes goes through `Api.call`, and every way one can fail becomes
an `Unreachable` (no answer: exit 6) or an `ApiError` (the server's refusal, with what to
do about it). Plain urllib: JSON in and out needs nothing more.

No Origin header is sent (this is not a browser), so the server's cross-site refusal of
browser writes does not apply; a token rides as a bearer token; without one, identity
comes from `tailscale serve` in front of the server (or dev mode on loopback).
"""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

from cpl.failures import ApiError, CplError, Unreachable

VERSION = "0.1"
USER_AGENT = f"cpl/{VERSION}"
GATEWAY = (502, 503, 504)  # a proxy (tailscale serve) answering for a server that is down


@dataclass
class Api:
    server: str
    token: str | None = None
    token_source: str = "none"
    timeout: float = 30.0

    def url(self, path: str, query: dict | None = None) -> str:
        clean = {k: v for k, v in (query or {}).items() if v not in (None, "", [])}
        return self.server + path + ("?" + urllib.parse.urlencode(clean, doseq=True)
                                     if clean else "")

    def call(self, method: str, path: str, body=None, *, query: dict | None = None,
             headers: dict | None = None, auth: bool = True,
             timeout: float | None = None) -> tuple[int, dict, dict]:
        """(status, JSON body, headers). Raises Unreachable or ApiError."""
        sent = {"Accept": "application/json", "User-Agent": USER_AGENT, **(headers or {})}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            sent["Content-Type"] = "application/json"
        if auth and self.token:
            sent["Authorization"] = f"Bearer {self.token}"
        request = urllib.request.Request(self.url(path, query), data=data, method=method,
                                         headers=sent)
        try:
            with urllib.request.urlopen(request, timeout=timeout or self.timeout) as response:
                return response.status, self._json(response.read(), path), dict(response.headers)
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            if exc.code in GATEWAY:
                raise Unreachable(f"{self.server} answered {exc.code}: the notebook server "
                                  "behind it is not answering", _offline_hint()) from None
            raise self._refusal(exc.code, raw) from None
        except urllib.error.URLError as exc:
            raise Unreachable(f"cannot reach {self.server} ({_reason(exc.reason)})",
                              _offline_hint()) from None
        except (TimeoutError, ConnectionError, http.client.HTTPException) as exc:
            raise Unreachable(f"no answer from {self.server} ({_reason(exc)})",
                              _offline_hint()) from None

    def get(self, path: str, **query) -> dict:
        return self.call("GET", path, query=query)[1]

    def post(self, path: str, body: dict | None = None, **kw) -> dict:
        return self.call("POST", path, body if body is not None else {}, **kw)[1]

    def put(self, path: str, body: dict) -> dict:
        return self.call("PUT", path, body)[1]

    def absolute(self, url: str) -> str:
        return url if "://" in url else self.server + url

    # -- what went wrong ------------------------------------------------------------------

    def _json(self, raw: bytes, path: str) -> dict:
        if not raw:
            return {}
        try:
            data = json.loads(raw)
        except ValueError:
            raise CplError(f"{self.server}{path} did not answer with JSON",
                           f"is {self.server} a Commonplace server? (cpl login --server URL)"
                           ) from None
        return data if isinstance(data, dict) else {"items": data}

    def _refusal(self, status: int, raw: bytes) -> ApiError:
        try:
            error = json.loads(raw).get("error") or {}
        except (ValueError, AttributeError):
            error = {}
        if not isinstance(error, dict):
            error = {}
        code = str(error.get("code") or f"http_{status}")
        message = str(error.get("message") or f"the server answered {status}")
        if error.get("field"):
            message += f" (field: {error['field']})"
        return ApiError(status, code, message, error, self._hint(status, error))

    def _hint(self, status: int, error: dict) -> str:
        seen = f"The server took you for {error['seen_as']}.\n" if error.get("seen_as") else ""
        make = ("Make a token on the server: commonplace token create NAME --role owner\n"
                f"then: cpl login --server {self.server} --with-token < token-file")
        if status == 401:
            where = {"env": "COMMONPLACE_TOKEN", "flag": "--token", "keyring": "the keyring",
                     "config": "the config file"}.get(self.token_source, "your token")
            return f"The token from {where} was refused (revoked or mistyped).\n" + make
        if status == 403:
            if "read-only" in str(error.get("message", "")):
                return seen + "You have read-only access; ask the owner, or use an owner token."
            if self.token is None:
                return (seen + "On a device of your tailnet, open the server by its tailnet "
                        "name (https://<machine>.<tailnet>.ts.net, served by tailscale "
                        "serve); elsewhere (SSH, scripts, tagged devices) use a token.\n"
                        + make)
            return seen + "This token's role cannot do that; use an owner token.\n" + make
        if status == 422 and "queue_anyway" in str(error.get("message", "")):
            # the API's answer names its JSON field; here the way to say it is a flag
            return "cpl run --anyway queues it all the same, to wait for a runner that can."
        return ""


def _reason(reason) -> str:
    text = str(getattr(reason, "strerror", None) or reason or "no answer")
    return text.removeprefix("[Errno 111] ")


def _offline_hint() -> str:
    return ("Is the server running and this device on the tailnet? "
            "`cpl whoami` shows which server cpl uses; `cpl login --server URL` changes it.")
