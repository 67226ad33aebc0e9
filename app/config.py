"""Configuration: defaults, then COMMONPLACE_* environment variables, then an explicit mapping.

Every setting the README's configuration table lists is read here and nowhere else.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def ascii_lower(value: str) -> str:
    """Lower-case A-Z and nothing else. Logins compare case-insensitively as email
    addresses do, but only in ASCII: str.lower() folds the Kelvin sign (U+212A) to "k" and
    the dotted capital I (U+0130) to "i" + a combining dot, so a login nobody configured
    could fold into one somebody did."""
    return value.translate(ASCII_LOWER)


def _split(value: str | None) -> list[str]:
    return [ascii_lower(part.strip()) for part in (value or "").split(",") if part.strip()]


def _seconds(env: dict[str, str], name: str, default: float) -> float:
    try:
        value = float(env.get(name) or default)
    except ValueError:
        raise SystemExit(f"{name} must be a number of seconds") from None
    if not 0 <= value <= 3600:
        raise SystemExit(f"{name} must be between 0 and 3600 seconds")
    return value


def system_timezone() -> str:
    tz = os.environ.get("TZ")
    if tz:
        return tz
    try:
        link = os.readlink("/etc/localtime")
        return link.split("zoneinfo/", 1)[1]
    except (OSError, IndexError):
        return "UTC"


AUTH_MODES = ("serve", "whois", "dev")
DEFAULT_SCHEDULED_RUNS_PER_MINUTE = 4
# The web's size (gunicorn.conf.py reads these too): a long poll may hold at most half of a
# worker's threads, so pages and health checks always have the other half.
DEFAULT_WEB_WORKERS, DEFAULT_WEB_THREADS = 2, 8
# Linux tailscaled's socket (paths.DefaultTailscaledSocket); /run is the same place on
# systemd distributions. Other platforms: see docs/DEPLOY.md.
DEFAULT_TAILSCALE_SOCKET = "/var/run/tailscale/tailscaled.sock"


def trusted_hosts(names: list[str]) -> list[str]:
    """Host names a request may carry (Flask TRUSTED_HOSTS; ports are ignored). Loopback
    names always, so the CLI and health checks work; the tailnet name(s) from config."""
    return ["localhost", "127.0.0.1", *[n for n in names if n not in ("localhost", "127.0.0.1")]]


def web_size(env: dict[str, str] | None = None) -> tuple[int, int]:
    """(workers, threads per worker) from COMMONPLACE_WEB_WORKERS / _THREADS."""
    env = os.environ if env is None else env
    try:
        workers = int(env.get("COMMONPLACE_WEB_WORKERS") or DEFAULT_WEB_WORKERS)
        threads = int(env.get("COMMONPLACE_WEB_THREADS") or DEFAULT_WEB_THREADS)
    except ValueError:
        raise SystemExit("COMMONPLACE_WEB_WORKERS and _THREADS must be whole numbers") from None
    if not (1 <= workers <= 16 and 2 <= threads <= 64):
        raise SystemExit("COMMONPLACE_WEB_WORKERS must be 1-16 and _THREADS 2-64")
    return workers, threads


def listen_addresses(config: dict) -> list[str]:
    """Where gunicorn listens: the TCP address (runners, scripts, health checks, anything on
    this machine), and in serve mode also the unix socket that `tailscale serve` proxies
    to, the one place identity headers are believed (app/web/auth/listeners.py)."""
    addresses = [config["BIND"]]
    if config["AUTH_MODE"] == "serve":
        addresses.append("unix:" + str(config["SERVE_SOCKET"]))
    return addresses


def from_environment(env: dict[str, str] | None = None) -> dict:
    env = dict(os.environ if env is None else env)
    data_dir = Path(
        env.get("COMMONPLACE_DATA_DIR") or Path.home() / ".local" / "share" / "commonplace"
    ).expanduser()
    owners = _split(env.get("COMMONPLACE_OWNERS"))
    auth = (env.get("COMMONPLACE_AUTH") or ("serve" if owners else "dev")).strip().lower()
    if auth not in AUTH_MODES:
        raise SystemExit(f"COMMONPLACE_AUTH must be one of {', '.join(AUTH_MODES)}, not {auth!r}")
    timezone = env.get("COMMONPLACE_TIMEZONE") or system_timezone()
    try:
        ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError):
        raise SystemExit(f"COMMONPLACE_TIMEZONE: unknown time zone {timezone!r}") from None
    return {
        "DATA_DIR": data_dir,
        "DATABASE_URL": env.get("COMMONPLACE_DATABASE_URL")
        or f"sqlite:///{data_dir / 'commonplace.db'}",
        "BIND": env.get("COMMONPLACE_BIND") or "127.0.0.1:8000",
        # serve mode: `tailscale serve` proxies here (`serve unix:<path>`); no runner, script
        # or TCP forward can reach this socket, so it is where serve's headers are believed.
        "SERVE_SOCKET": str(Path(env.get("COMMONPLACE_SERVE_SOCKET")
                                 or data_dir / "web.sock").expanduser()),
        "AUTH_MODE": auth,
        "OWNERS": owners,
        "VIEWERS": _split(env.get("COMMONPLACE_VIEWERS")),
        "TIMEZONE": timezone,
        "FEED_TOKEN": env.get("COMMONPLACE_FEED_TOKEN") or "",
        # tags whose entries `commonplace publish` never publishes, besides `private`
        "PRIVATE_TAGS": tuple(t.lstrip("#") for t in _split(env.get("COMMONPLACE_PRIVATE_TAGS"))),
        # DNS rebinding: a page elsewhere that resolves its own name to 127.0.0.1 reaches
        # the web as "same origin"; Flask answers 400 to any Host not listed here.
        "TRUSTED_HOSTS": trusted_hosts(_split(env.get("COMMONPLACE_HOSTS"))),
        "TAILSCALE_SOCKET": env.get("COMMONPLACE_TAILSCALE_SOCKET") or DEFAULT_TAILSCALE_SOCKET,
        "WHOIS_CACHE_SECONDS": _seconds(env, "COMMONPLACE_WHOIS_CACHE_SECONDS", 10.0),
        # Long polls (the runner API's lease) one worker holds at once: half its threads.
        "LONG_POLLS_PER_WORKER": max(1, web_size(env)[1] // 2),
        # Request bodies still arriving that one worker reads at once (a quarter of its
        # threads), and that one caller may have arriving there (app/web/bodies.py).
        "ARRIVING_BODIES_PER_WORKER": max(1, web_size(env)[1] // 4),
        "ARRIVING_BODIES_PER_CALLER": 2,
        # Bodies over that share that one worker lets wait a moment at once to arrive whole
        # (half its threads): with the slots, pages still have a quarter of them.
        "BODY_WAITS_PER_WORKER": max(1, web_size(env)[1] // 2),
        # A body may keep the web waiting this long before it must average 8 KiB/s.
        "BODY_GRACE_S": _number(env, "COMMONPLACE_BODY_GRACE", 10.0),
        # The most one search may keep the index busy before it is stopped (422).
        "SEARCH_TIME_LIMIT_S": _number(env, "COMMONPLACE_SEARCH_TIME_LIMIT", 0.4),
        # Attachments are the largest legitimate bodies; everything else is far smaller.
        "MAX_CONTENT_LENGTH": int(env.get("COMMONPLACE_MAX_UPLOAD_MB") or 20) * 1024 * 1024,
        # Entries may be up to 1M characters; a form posts them URL-encoded, which can
        # triple their size, and Werkzeug refuses form fields over 500 kB by default.
        "MAX_FORM_MEMORY_SIZE": 8 * 1024 * 1024,
        # The experiment journal: a runner renews its lease every TTL/4 seconds; the
        # scheduler's reaper marks a run LOST once its lease has run out.
        "LEASE_TTL_S": _number(env, "COMMONPLACE_LEASE_TTL", 60.0),
        "REAPER_INTERVAL_S": _number(env, "COMMONPLACE_REAPER_INTERVAL", 15.0),
        # A run that spans hosts waits this long for all its runners to join its lease;
        # then the partial claim is released and the run stays queued.
        "GANG_WAIT_S": _number(env, "COMMONPLACE_GANG_WAIT", 120.0),
        "MAX_QUEUE_AGE_S": _number(env, "COMMONPLACE_MAX_QUEUE_HOURS", 24.0) * 3600,
        # Runs all schedules together may start in one minute: one schedule fires at most
        # every 10 minutes, but thirty of them on the same minute would be thirty runs.
        "SCHEDULED_RUNS_PER_MINUTE": int(_number(env, "COMMONPLACE_SCHEDULED_RUNS_PER_MINUTE",
                                                 DEFAULT_SCHEDULED_RUNS_PER_MINUTE)),
        "BACKUP_KEEP_DAYS": int(_number(env, "COMMONPLACE_BACKUP_KEEP_DAYS", 14)),
        # Where the scheduler POSTs a run's regressions (an ntfy topic, say); none if empty.
        "WEBHOOK_URL": webhook_url(env.get("COMMONPLACE_WEBHOOK_URL") or ""),
    }


def webhook_url(url: str) -> str:
    """An http(s) URL with a host, or "" for none: a typo fails at start, not at the first
    regression."""
    url = url.strip()
    if url and not re.fullmatch(r"https?://[^\s/?#]+[^\s]*", url):
        raise SystemExit("COMMONPLACE_WEBHOOK_URL must be an http:// or https:// URL")
    return url


def _number(env: dict, name: str, default: float) -> float:
    raw = env.get(name)
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise SystemExit(f"{name}: expected a number, got {raw!r}") from None
    if value <= 0:
        raise SystemExit(f"{name}: must be positive")
    return value
