#!/bin/sh
# Publish the web (127.0.0.1:8000) on the tailnet with HTTPS, in the background, and keep it
# across reboots. Serve sets Tailscale-User-Login on each request; Funnel stays off.
exec tailscale serve --bg --https=443 http://127.0.0.1:8000
