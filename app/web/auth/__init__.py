"""Who is asking, and what they may do. The one place access is decided.

Every request passes `policy.check_request` (a before_request hook): cross-site writes are
refused, `identity.identify()` names the caller, and the policy says what that caller may
do. `tailscaled.py` asks tailscaled in whois mode. Response headers and the other HTTP
defences are app/web/hardening.py.
There is no login page: identity comes from the tailnet, or from a bearer token.

Identity modes (COMMONPLACE_AUTH):
  serve  Behind `tailscale serve` (the default deployment). The web binds 127.0.0.1 and
         serve sets Tailscale-User-Login / -Name on each request it proxies, after deleting
         any the client sent. We believe them only on a loopback connection (nothing else
         went through serve) and never on a Funnel request (the public internet).
  whois  Bound to the tailnet address directly. We ask tailscaled's LocalAPI who is at the
         connection's remote address, over its unix socket; briefly cached; if tailscaled
         does not answer, nobody gets in.
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
from werkzeug.middleware.proxy_fix import ProxyFix

from app.config import AUTH_MODES
from app.web.auth.policy import check_request

log = logging.getLogger(__name__)


def init_app(app: Flask) -> None:
    mode = app.config["AUTH_MODE"]
    if mode not in AUTH_MODES:
        raise ValueError(f"AUTH_MODE must be one of {AUTH_MODES}, not {mode!r}")
    if mode == "serve":
        # `tailscale serve` is exactly one proxy and Sets X-Forwarded-For and -Proto (its
        # serve.go), so trust one hop of each. It passes Host through unchanged, so
        # X-Forwarded-Host is not trusted: believing it would let any local client name a
        # trusted host and walk past TRUSTED_HOSTS.
        app.wsgi_app = ProxyFix(app.wsgi_app, x_for=1, x_proto=1, x_host=0, x_port=0,
                                x_prefix=0)
    if mode == "dev":
        log.warning(
            "COMMONPLACE_AUTH=dev: every loopback connection is the owner. Set "
            "COMMONPLACE_OWNERS (and serve through `tailscale serve`) for anything but a laptop."
        )
    elif not app.config["OWNERS"]:
        log.warning("COMMONPLACE_AUTH=%s but COMMONPLACE_OWNERS is empty: no tailnet login "
                    "can write (bearer tokens still work)", mode)
    app.before_request(check_request)
