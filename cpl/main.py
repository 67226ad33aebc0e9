"""The `cpl` command: a click group with the global options, and every subcommand."""

from __future__ import annotations

import click

from cpl.api_client import VERSION
from cpl.commands.capture import drafts_command, note, queue
from cpl.commands.reading import edit, search, show, week
from cpl.commands.runs import experiments, run, runs
from cpl.commands.setup import completion, help_command, login, logout, whoami
from cpl.context import Ctx
from cpl.failures import EXIT_CODES

EPILOG = """\b
Examples:
  cpl note "try 1F1B with 8 micro-batches #pipeline"
  cpl week --edit
  cpl search 'bubble tag:pipeline from:2024-01-01'
  cpl run data_parallel -p steps=1 -p warmup=0 --watch
  cpl runs compare 41 42

\b
Exit codes:
""" + "\n".join(f"  {code:>3}  {meaning}" for code, meaning in EXIT_CODES) + """

\b
Server and token: --server/--token, COMMONPLACE_SERVER/COMMONPLACE_TOKEN, the keyring,
the config file (`cpl help config`). Every listing takes --json (`cpl help json`).
"""


@click.group(epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"],
                                              "max_content_width": 100})
@click.option("--server", metavar="URL", help="The notebook server (else COMMONPLACE_SERVER, "
              "the config file, http://127.0.0.1:8000).")
@click.option("--token", metavar="TOKEN", help="A bearer token (prefer COMMONPLACE_TOKEN or "
              "`cpl login`: a flag shows in `ps` and shell history).")
@click.option("--color", type=click.Choice(["auto", "always", "never"]), default="auto",
              show_default=True, help="Colour and terminal layout; NO_COLOR also turns "
              "colour off.")
@click.version_option(VERSION, prog_name="cpl")
@click.pass_context
def cli(click_ctx, server, token, color):
    """cpl: your Commonplace notebook and experiment journal from a terminal.

    It talks to the server's JSON API, so it works from any device of your tailnet or
    over SSH.
    """
    click_ctx.obj = Ctx(server_flag=server, token_flag=token, color=color)


for command in (note, week, show, edit, search, queue, drafts_command, experiments, run, runs,
                login, logout, whoami, completion, help_command):
    cli.add_command(command)


def main() -> None:
    cli(prog_name="cpl")
