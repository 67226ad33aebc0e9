"""What every `cpl` command shares: its global options, and made from them when first
needed, the profile (server and token), the API client and the terminal."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property

import click

from cpl.api_client import Api
from cpl.profile import Profile, read_config, recall, resolve
from cpl.terminal import Out


@dataclass
class Ctx:
    server_flag: str | None = None
    token_flag: str | None = None
    color: str = "auto"
    extra: dict = field(default_factory=dict)

    @cached_property
    def config(self) -> dict:
        return read_config()

    @cached_property
    def profile(self) -> Profile:
        return resolve(self.server_flag, self.token_flag, self.config)

    @cached_property
    def api(self) -> Api:
        return Api(self.profile.server, self.profile.token, self.profile.token_source)

    @cached_property
    def out(self) -> Out:
        return Out(self.color, str(self.config.get("palette", "16")))


pass_ctx = click.make_pass_decorator(Ctx, ensure=True)


def json_option(func):
    return click.option("--json", "as_json", is_flag=True,
                        help="Print JSON instead (its shape: `cpl help json`).")(func)


def print_json(data) -> None:
    click.echo(json.dumps(data, indent=2, ensure_ascii=False))


def done(code: int) -> None:
    """End the command with `code` (commands return normally for 0)."""
    if code:
        raise click.exceptions.Exit(code)


def complete_from(name: str):
    """A shell-completion callback offering what `cpl` remembered (never the network)."""

    def complete(_ctx, _param, incomplete: str):
        return [v for v in recall(name) if v.startswith(incomplete)]

    return complete
