"""Configuration: defaults, then COMMONPLACE_* environment variables, then an explicit mapping.

Every setting the README's configuration table lists is read here and nowhere else.
"""

from __future__ import annotations

import os
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError


def _split(value: str | None) -> list[str]:
    return [part.strip().lower() for part in (value or "").split(",") if part.strip()]


def system_timezone() -> str:
    tz = os.environ.get("TZ")
    if tz:
        return tz
    try:
        link = os.readlink("/etc/localtime")
        return link.split("zoneinfo/", 1)[1]
    except (OSError, IndexError):
        return "UTC"


def from_environment(env: dict[str, str] | None = None) -> dict:
    env = dict(os.environ if env is None else env)
    data_dir = Path(
        env.get("COMMONPLACE_DATA_DIR") or Path.home() / ".local" / "share" / "commonplace"
    ).expanduser()
    owners = _split(env.get("COMMONPLACE_OWNERS"))
    auth = env.get("COMMONPLACE_AUTH") or ("serve" if owners else "dev")
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
        "AUTH_MODE": auth,
        "OWNERS": owners,
        "VIEWERS": _split(env.get("COMMONPLACE_VIEWERS")),
        "TIMEZONE": timezone,
        "FEED_TOKEN": env.get("COMMONPLACE_FEED_TOKEN") or "",
        # Attachments are the largest legitimate bodies; everything else is far smaller.
        "MAX_CONTENT_LENGTH": int(env.get("COMMONPLACE_MAX_UPLOAD_MB") or 20) * 1024 * 1024,
        # Entries may be up to 1M characters; a form posts them URL-encoded, which can
        # triple their size, and Werkzeug refuses form fields over 500 kB by default.
        "MAX_FORM_MEMORY_SIZE": 8 * 1024 * 1024,
    }
