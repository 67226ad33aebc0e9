"""Where `cpl` talks to, as whom, and where it keeps its files.

The server comes from --server, then COMMONPLACE_SERVER, then the config file, then the
default (a `commonplace up` on this machine). The token comes from --token, then
COMMONPLACE_TOKEN, then the system keyring (service "commonplace", one entry per server),
then the config file's [tokens] table — written only after `cpl login --insecure-storage`,
because a silent plain-text fallback is the credential complaint gh hears most. Behind
`tailscale serve` a tailnet device needs no token at all: serve names the person.

The config file is TOML under the XDG config dir, mode 0600; a wider mode is warned about
(it may hold a token). State (the outbox, drafts, the completion cache) lives under the
XDG state dir.
"""

from __future__ import annotations

import json
import os
import stat
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import click
import platformdirs

from base.durable import write_private
from cpl.failures import USAGE, CplError

APP = "commonplace"
DEFAULT_SERVER = "http://127.0.0.1:8000"  # what `commonplace up` binds
KEYRING_SERVICE = "commonplace"
_warned: set[str] = set()


# -- paths --------------------------------------------------------------------------------


def config_file() -> Path:
    return platformdirs.user_config_path(APP) / "config.toml"


def state_dir() -> Path:
    return platformdirs.user_state_path(APP)


def drafts_dir() -> Path:
    return state_dir() / "drafts"


def outbox_dir() -> Path:
    return state_dir() / "outbox"


def cache_dir() -> Path:
    return state_dir() / "cache"


# -- the config file ----------------------------------------------------------------------


def warn_if_open(path: Path) -> None:
    """Say once if a file that may hold a token can be read by others."""
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except OSError:
        return
    if mode & 0o077 and str(path) not in _warned:
        _warned.add(str(path))
        click.echo(f"cpl: warning: {path} is readable by others (mode {mode:04o}); "
                   f"run: chmod 600 {path}", err=True)


def read_config() -> dict:
    path = config_file()
    if not path.exists():
        return {}
    warn_if_open(path)
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise CplError(f"cannot read {path}: {exc}", "fix or delete the file") from None


def _toml(data: dict) -> str:
    # JSON strings are valid TOML basic strings: enough for our flat keys and one table.
    lines = [f"{k} = {json.dumps(v)}" for k, v in data.items() if not isinstance(v, dict)]
    for table, values in data.items():
        if isinstance(values, dict) and values:
            lines += ["", f"[{table}]"]
            lines += [f"{json.dumps(k)} = {json.dumps(v)}" for k, v in values.items()]
    return "\n".join(lines) + "\n"


def save_config(data: dict) -> Path:
    path = config_file()
    write_private(path, "# cpl's settings (cpl login writes this file)\n" + _toml(data))
    return path


# -- server and token ---------------------------------------------------------------------


def normalize_server(url: str) -> str:
    """"notes.tail1234.ts.net" → "https://notes.tail1234.ts.net" (serve gives HTTPS)."""
    url = url.strip().rstrip("/")
    if "://" not in url:
        url = "https://" + url
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise CplError(f"{url!r} is not a server address",
                       "give one like https://notes.<tailnet>.ts.net or "
                       "http://127.0.0.1:8000", exit_code=USAGE)
    return url


@dataclass
class Profile:
    server: str
    server_source: str  # flag | env | config | default
    token: str | None
    token_source: str  # flag | env | keyring | config | none
    config: dict = field(default_factory=dict)


def resolve(server_flag: str | None, token_flag: str | None,
            config: dict | None = None) -> Profile:
    config = read_config() if config is None else config
    for source, value in (("flag", server_flag), ("env", os.environ.get("COMMONPLACE_SERVER")),
                          ("config", config.get("server"))):
        if value:
            server, server_source = normalize_server(str(value)), source
            break
    else:
        server, server_source = DEFAULT_SERVER, "default"
    if token_flag:
        return Profile(server, server_source, token_flag, "flag", config)
    if os.environ.get("COMMONPLACE_TOKEN"):
        return Profile(server, server_source, os.environ["COMMONPLACE_TOKEN"], "env", config)
    token = keyring_get(server)
    if token:
        return Profile(server, server_source, token, "keyring", config)
    token = (config.get("tokens") or {}).get(server)
    if token:
        return Profile(server, server_source, str(token), "config", config)
    return Profile(server, server_source, None, "none", config)


# -- the system keyring -------------------------------------------------------------------
# keyring is imported when used: it finds its backends at import, which costs time on
# every command that never needs it. Headless hosts (SSH, containers) often have no usable
# backend; every failure there means "no keyring", never a crash.


def keyring_get(server: str) -> str | None:
    try:
        import keyring

        return keyring.get_password(KEYRING_SERVICE, server)
    except Exception:  # noqa: BLE001 (any backend failure means: nothing stored there)
        return None


def keyring_set(server: str, token: str) -> str | None:
    """Store the token; None on success, else why the keyring could not take it."""
    try:
        import keyring

        keyring.set_password(KEYRING_SERVICE, server, token)
        return None
    except Exception as exc:  # noqa: BLE001
        return str(exc) or type(exc).__name__


def keyring_delete(server: str) -> bool:
    try:
        import keyring

        keyring.delete_password(KEYRING_SERVICE, server)
        return True
    except Exception:  # noqa: BLE001
        return False


# -- what completion offers (no network while the shell completes) -------------------------


def remember(name: str, values: list[str]) -> None:
    try:
        write_private(cache_dir() / f"{name}.json", json.dumps(values[:200]))
    except OSError:
        pass  # a cache is optional


def recall(name: str) -> list[str]:
    try:
        return [str(v) for v in json.loads((cache_dir() / f"{name}.json").read_text())]
    except (OSError, ValueError, TypeError):
        return []
