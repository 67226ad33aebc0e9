"""Who is asking, and what they may do. The one place access is decided.

Every request passes `policy.check_request` (a before_request hook): cross-site writes are
refused, `identity.identify()` names the caller, and the policy says what that caller may
do. `tailscaled.py` asks tailscaled in whois mode. Response headers and the other HTTP
defences are app/web/hardening.py.
There is no login page: identity comes from the tailnet, or from a bearer token.

Identity modes (COMMONPLACE_AUTH):
  serve  Behind `tailscale serve` (the default deployment). serve proxies to a unix socket
         of the web's (COMMONPLACE_SERVE_SOCKET) and sets Tailscale-User-Login / -Name on
         each request, after deleting any the client sent. We believe them only on that
         socket (listeners.py: runners and raw TCP forwards reach only the TCP address),
         compare the login as serve sent it (serve_headers.py), and never let in a Funnel
         request (the public internet).
  whois  Bound to the tailnet address directly. We ask tailscaled's LocalAPI who is at the
         connection's remote address, over its unix socket; briefly cached; if tailscaled
         does not answer, nobody gets in. A proxied request, or one from this node itself,
         is nobody: whois would name the proxy's node.
  dev    A loopback connection that did not come through a proxy is the owner. Loudly
         logged; for one laptop. Never the Docker image's default.
Bearer tokens (named, hashed, revocable) work in every mode: for the CLI, scripts, tagged
nodes (which have no user identity) and runners. A `feed` token may also ride in the URL
of /feed.atom, because feed readers cannot send headers.

Policy: owners (COMMONPLACE_OWNERS) do everything; viewers (COMMONPLACE_VIEWERS) read;
runner tokens call the runner API (/api/v1/runner/...) and nothing else; feed tokens read
the feed and nothing else. Anyone else gets 403 with who they were seen as.
"""

from __future__ import annotations

import logging

from flask import Flask

from app.config import AUTH_MODES
from app.web.auth.listeners import ServeDoor
from app.web.auth.policy import check_request

log = logging.getLogger(__name__)


def init_app(app: Flask) -> None:
    mode = app.config["AUTH_MODE"]
    if mode not in AUTH_MODES:
        raise ValueError(f"AUTH_MODE must be one of {AUTH_MODES}, not {mode!r}")
    if mode == "serve":
        # serve's forwarded headers are read on serve's socket only; on the TCP address
        # nothing forwarded is believed (a local client could name any host or peer).
        app.wsgi_app = ServeDoor(app, app.wsgi_app, str(app.config["SERVE_SOCKET"]))
    app.before_request(check_request)


def warn_of_open_doors(config) -> None:
    """Said once by the process that serves pages (gunicorn's master), not by each command
    that opens the notebook to import, export or make a token: those serve nobody, and a
    warning about who may come in reads there as if they did."""
    if config["AUTH_MODE"] == "dev":
        log.warning(
            "COMMONPLACE_AUTH=dev: every loopback connection is the owner. Set "
            "COMMONPLACE_OWNERS (and serve through `tailscale serve`) for anything but a laptop."
        )
    elif not config["OWNERS"]:
        log.warning("COMMONPLACE_AUTH=%s but COMMONPLACE_OWNERS is empty: no tailnet login "
                    "can write (bearer tokens still work)", config["AUTH_MODE"])
