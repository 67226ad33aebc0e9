"""Setting up: `cpl login`, `cpl logout`, `cpl whoami`, `cpl completion` and `cpl help`."""

from __future__ import annotations

import sys

import click
from click.shell_completion import get_completion_class
from rich.text import Text

from cpl import outbox, shapes
from cpl.api_client import Api
from cpl.commands.capture import report_drain
from cpl.context import Ctx, json_option, pass_ctx, print_json
from cpl.failures import AUTH, EXIT_CODES, ApiError, CplError
from cpl.profile import (
    config_file,
    drafts_dir,
    keyring_delete,
    keyring_set,
    normalize_server,
    save_config,
    state_dir,
)


def who(api: Api) -> dict:
    """GET /api/v1/me, with what to do when the server will not say."""
    return api.get("/api/v1/me")


def identity_line(me: dict) -> str:
    name = f"{me.get('name')} ({me.get('login')})" if me.get("name") else me.get("login")
    return f"{name}, {me.get('role')}, via {me.get('via')}"


@click.command("login", short_help="Check a server and remember it (and a token).")
@click.option("--server", "server", help="The notebook's address, e.g. "
              "https://notes.<tailnet>.ts.net (default: the one in use).")
@click.option("--with-token", is_flag=True, help="Read a token from standard input.")
@click.option("--insecure-storage", is_flag=True, help="Keep the token in the config file "
              "(0600) when there is no usable system keyring.")
@pass_ctx
def login(ctx: Ctx, server, with_token, insecure_storage):
    """Check a server (/healthz, then who it takes you for) and remember it.

    On a device of your tailnet, with `tailscale serve` in front of the server, no token
    is needed. Elsewhere (SSH, scripts, tagged devices) make one on the server with
    `commonplace token create NAME --role owner` and give it here; it is kept in the
    system keyring (or, with --insecure-storage, in the 0600 config file).

    \b
    Examples:
      cpl login --server https://notes.tail1234.ts.net
      cpl login --server https://notes.tail1234.ts.net --with-token < token.txt
      COMMONPLACE_TOKEN=cp_… cpl login        # check an environment token
    """
    address = normalize_server(server) if server else ctx.profile.server
    token = sys.stdin.readline().strip() if with_token else None
    if with_token and not token:
        raise CplError("--with-token read no token from standard input", exit_code=2)
    source = "stdin" if token else None
    if token is None and ctx.token_flag:
        token, source = ctx.token_flag, "flag"
    if token is None and address == ctx.profile.server:
        token, source = ctx.profile.token, ctx.profile.token_source
    api = Api(address, token, source or "none")
    health = api.call("GET", "/healthz", auth=False)[1]
    if health.get("status") != "ok":
        raise CplError(f"{address}/healthz answered {health}", "is this a Commonplace server?")
    try:
        me = who(api)
    except ApiError as exc:
        exc.message = f"{address} is up, but: {exc.message}"
        raise
    config = dict(ctx.config)
    config["server"] = address
    stored = ""
    if token and source in ("stdin", "flag"):
        problem = keyring_set(address, token)
        if problem is None:
            stored = "token kept in the system keyring"
            (config.get("tokens") or {}).pop(address, None)
        elif insecure_storage:
            config["tokens"] = {**(config.get("tokens") or {}), address: token}
            stored = f"token kept in {config_file()} (0600)"
        else:
            raise CplError(f"there is no usable system keyring here ({problem})",
                           "Keep the token in the config file with --insecure-storage, or "
                           "set COMMONPLACE_TOKEN in the environment instead.",
                           exit_code=AUTH)
    path = save_config(config)
    ctx.out.note(f"{address} is up; signed in as {identity_line(me)}")
    ctx.out.note(stored or f"server saved in {path}" + ("" if token else " (no token needed)"))
    if any(c.server == address for c in outbox.queued()):
        report_drain(ctx.out, outbox.drain(api))


@click.command("logout", short_help="Forget the token of the server in use.")
@pass_ctx
def logout(ctx: Ctx):
    """Forget the token of the server in use (keyring and config file).

    \b
    Example:
      cpl logout
    """
    server = ctx.profile.server
    removed = keyring_delete(server)
    config = dict(ctx.config)
    tokens = dict(config.get("tokens") or {})
    if tokens.pop(server, None) is not None:
        config["tokens"] = tokens
        save_config(config)
        removed = True
    ctx.out.note(f"forgot the token for {server}" if removed else f"no token stored for {server}")


@click.command("whoami", short_help="Which server and token, and who you are there.")
@json_option
@pass_ctx
def whoami(ctx: Ctx, as_json):
    """Which server cpl uses (and why), where its token comes from, and who the server
    takes you for.

    \b
    Examples:
      cpl whoami
      cpl --server https://notes.tail1234.ts.net whoami
    """
    profile = ctx.profile
    me = who(ctx.api)
    waiting = [c for c in outbox.queued() if c.server == profile.server]
    data = {"server": profile.server, "server_source": profile.server_source,
            "token_source": profile.token_source, "login": me.get("login"),
            "role": me.get("role"), "via": me.get("via"), "config_file": str(config_file()),
            "state_dir": str(state_dir()), "queued": len(waiting)}
    if as_json:
        print_json(data)
        return
    ctx.out.print(Text.assemble("signed in as ", (identity_line(me), "title")))
    ctx.out.print(f"server   {profile.server} (from {profile.server_source})")
    ctx.out.print(f"token    {profile.token_source}")
    ctx.out.print(f"config   {config_file()}")
    ctx.out.print(f"drafts   {drafts_dir()}")
    if waiting:
        ctx.out.print(Text(f"queued   {len(waiting)} note(s) waiting: cpl queue flush",
                           style="yellow"))


@click.command("completion", short_help="Shell completion for bash, zsh or fish.")
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
@click.pass_context
def completion(click_ctx, shell):
    """Print the shell completion script for bash, zsh or fish.

    \b
    Examples:
      cpl completion bash > ~/.local/share/bash-completion/completions/cpl
      cpl completion zsh > "${fpath[1]}/_cpl"
      cpl completion fish > ~/.config/fish/completions/cpl.fish
    """
    root = click_ctx.find_root().command
    script = get_completion_class(shell)(root, {}, "cpl", "_CPL_COMPLETE")
    click.echo(script.source())


def config_topic() -> str:
    return f"""Where cpl finds the server and the token, first found wins:
  server: --server, COMMONPLACE_SERVER, `server` in the config file, http://127.0.0.1:8000
  token:  --token, COMMONPLACE_TOKEN, the system keyring, [tokens] in the config file
          (with none, a tailnet device behind `tailscale serve` is known by its login)
  editor: COMMONPLACE_EDITOR, VISUAL, EDITOR, `editor` in the config file, vi
  colour: --color auto|always|never, NO_COLOR, CLICOLOR_FORCE, `palette` in the config
          file (16 by default: the terminal's own colours; 256 or truecolor)
The config file (TOML, mode 0600): {config_file()}
State (offline queue, drafts, completion cache): {state_dir()}"""


TOPICS = {
    "json": lambda: shapes.__doc__ or "",
    "exit-codes": lambda: "\n".join(f"  {code:>3}  {meaning}" for code, meaning in EXIT_CODES),
    "config": config_topic,
}


@click.command("help", short_help="More help: json, exit-codes, config.")
@click.argument("topic", required=False, type=click.Choice(sorted(TOPICS)))
@click.pass_context
def help_command(click_ctx, topic):
    """More about cpl: json (the --json shapes), exit-codes, config.

    \b
    Examples:
      cpl help json
      cpl help exit-codes
    """
    if topic is None:
        click.echo(click_ctx.find_root().get_help())
        return
    click.echo(TOPICS[topic]().strip("\n"))
