#!/bin/sh
# Publish the web on the tailnet with HTTPS, in the background, and keep it across reboots.
# serve proxies to the web's unix socket (COMMONPLACE_SERVE_SOCKET), the one door where the
# Tailscale-User-Login it sets is believed; 127.0.0.1:8000 is for runners and scripts with
# tokens. Needs tailscale 1.94 or newer (unix: targets). Funnel stays off.
exec tailscale serve --bg --https=443 "unix:${COMMONPLACE_SERVE_SOCKET:-/run/commonplace/web.sock}"
