"""The `commonplace` command: run the processes, migrate, move plain files in and out,
manage tokens. Client commands (note, week, search, run …) come with the API client.

The top of the layers: it builds the app and starts each process. The scheduler and the
runner are imported only by the command that runs them, so `commonplace web` never loads
APScheduler and a runner host never loads the server."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import click
import sqlalchemy as sa

from app import ROOT, create_app
from app import db as dbmod
from app.config import from_environment
from app.models import Token, utcnow
from app.notebook import rerender
from app.notebook.letters import ensure_this_week
from app.notebook.transfer import export_folder, import_folder
from app.web.auth.identity import hash_token, new_token
from app.web.hardening import bind_problem


def _app():
    return create_app()


def _db(app):
    return app.extensions["db"]


def migrate(app) -> None:
    database = _db(app)
    backup = dbmod.upgrade(database, Path(app.config["DATA_DIR"]) / "backups")
    if backup:
        click.echo(f"backed up the database to {backup}")
    rendered = rerender.refresh_all(database)
    if rendered:
        click.echo(f"rendered {rendered} notes again for the new renderer")


def _ensure_this_week(app) -> None:
    if ensure_this_week(_db(app), app.config["TIMEZONE"])[1]:
        click.echo("created this week's letter")


def gunicorn_argv(bind: str) -> list[str]:
    # Workers, threads, timeouts and logging live in gunicorn.conf.py (the same file Docker
    # and systemd use); the command line only names the address.
    return [sys.executable, "-m", "gunicorn", "--config", str(ROOT / "gunicorn.conf.py"),
            "--bind", bind, "app:create_app()"]


@click.group()
def main() -> None:
    """Commonplace: a personal notebook and experiment journal."""


@main.command()
@click.option("--allow-non-loopback", is_flag=True, envvar="COMMONPLACE_ALLOW_NON_LOOPBACK",
              help="Listen on a non-loopback COMMONPLACE_BIND (the tailnet address, whois mode).")
def up(allow_non_loopback: bool) -> None:
    """Everything for one machine: migrate, then web + scheduler + a local runner.
    Ctrl-C stops them all."""
    app = _app()
    bind = app.config["BIND"]
    problem = bind_problem(bind, app.config["AUTH_MODE"], allow_non_loopback)
    if problem:
        raise click.UsageError(problem)
    migrate(app)
    _ensure_this_week(app)
    if app.config["AUTH_MODE"] == "dev":
        click.secho("dev mode: loopback is the owner (set COMMONPLACE_OWNERS for tailnet use)",
                    fg="yellow", err=True)
    host, _, port = bind.rpartition(":")
    local = f"http://{'127.0.0.1' if host in ('0.0.0.0', '', '::') else host}:{port}"
    runner_env = {**os.environ, "COMMONPLACE_RUNNER_TOKEN": _local_runner_token(app)}
    me = [sys.executable, "-m", "app.cli"]
    children = [
        subprocess.Popen(gunicorn_argv(bind)),  # bind checked above
        subprocess.Popen([*me, "scheduler"]),
        subprocess.Popen([*me, "runner", "--server", local], env=runner_env),
    ]
    click.echo(f"Commonplace is running at http://{bind}/  (data in {app.config['DATA_DIR']})")
    _supervise(children)


def _local_runner_token(app) -> str:
    """A fresh runner token for the runner `up` starts; the previous one stops working."""
    secret = new_token()
    with _db(app).write() as session:
        row = session.scalar(sa.select(Token).where(Token.name == "local"))
        if row is None:
            session.add(Token(name="local", role="runner", token_hash=hash_token(secret)))
        else:
            row.role, row.token_hash, row.revoked_at = "runner", hash_token(secret), None
    return secret


def _supervise(children: list[subprocess.Popen]) -> None:
    """Wait until a child exits or we are told to stop; then stop every child we started."""
    stopping = False

    def _stop(_sig, _frame):
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    try:
        while not stopping and all(child.poll() is None for child in children):
            time.sleep(0.2)
    finally:
        for child in children:
            if child.poll() is None:
                child.terminate()
        deadline = time.monotonic() + 15
        for child in children:
            try:
                child.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.kill()
    failed = [c for c in children if c.returncode not in (0, -signal.SIGTERM)]
    if failed and not stopping:
        raise SystemExit(1)


@main.command()
@click.option("--allow-non-loopback", is_flag=True, envvar="COMMONPLACE_ALLOW_NON_LOOPBACK",
              help="Listen on a non-loopback COMMONPLACE_BIND (the tailnet address, whois mode).")
def web(allow_non_loopback: bool) -> None:
    """The web process alone: gunicorn on COMMONPLACE_BIND (loopback unless told otherwise)."""
    app = _app()
    bind = app.config["BIND"]
    problem = bind_problem(bind, app.config["AUTH_MODE"], allow_non_loopback)
    if problem:
        raise click.UsageError(problem)
    os.execv(sys.executable, gunicorn_argv(bind))


@main.command()
def scheduler() -> None:
    """The scheduler process alone: schedules, reaper, cards into letters, backups."""
    from app.journal.scheduler import main as run_scheduler  # APScheduler: only this process

    app = _app()
    migrate(app)
    run_scheduler(app)


@main.command()
@click.option("--server", required=True, help="the notebook's URL, e.g. https://notes.example.ts.net")
@click.option("--token", envvar="COMMONPLACE_RUNNER_TOKEN", required=True,
              help="a token of role runner (or set COMMONPLACE_RUNNER_TOKEN)")
@click.option("--work-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="where runs write their files [default: <data>/runner]")
def runner(server: str, token: str, work_dir: Path | None) -> None:
    """A runner agent: pulls runs from the server and executes them (GPU or CPU host)."""
    from jobs.runner import main as run_agent  # the agent needs nothing of the server

    folder = work_dir or Path(from_environment()["DATA_DIR"]) / "runner"
    folder.mkdir(parents=True, exist_ok=True)
    run_agent(server, token, folder)


@main.group()
def db() -> None:
    """Database maintenance."""


@db.command("upgrade")
def db_upgrade() -> None:
    """Back up the SQLite file, then apply pending migrations."""
    app = _app()
    migrate(app)
    click.echo("database is up to date")


@main.command("import")
@click.argument("folder", type=click.Path(exists=True, file_okay=False, path_type=Path))
def import_cmd(folder: Path) -> None:
    """Import a folder of markdown files (front matter, or YYYY-MM-DD*.md names)."""
    app = _app()
    migrate(app)
    report = import_folder(_db(app), folder)
    click.echo(f"created {report.created}, updated {report.updated}, "
               f"unchanged {report.unchanged}, errors {len(report.errors)}, "
               f"skipped {len(report.skipped)}")
    for skipped in report.skipped:
        click.echo(f"  skipped {skipped}", err=True)
    for error in report.errors:
        click.echo(f"  {error}", err=True)
    if report.errors:
        raise SystemExit(1)


@main.command("export")
@click.argument("folder", type=click.Path(file_okay=False, path_type=Path))
def export_cmd(folder: Path) -> None:
    """Write every entry as a markdown file with front matter under FOLDER."""
    app = _app()
    migrate(app)
    click.echo(f"exported {export_folder(_db(app), folder)} entries to {folder}")


@main.group()
def token() -> None:
    """Bearer tokens for the CLI, scripts, feed readers and runners."""


@token.command("create")
@click.argument("name")
@click.option("--role", type=click.Choice(["owner", "viewer", "runner", "feed"]),
              default="owner", show_default=True)
def token_create(name: str, role: str) -> None:
    """Create a token; it is shown once and stored only as a hash."""
    app = _app()
    migrate(app)
    secret = new_token()
    with _db(app).write() as session:
        if session.scalar(sa.select(Token).where(Token.name == name)):
            raise click.ClickException(f"a token named {name!r} exists; revoke it first")
        session.add(Token(name=name, role=role, token_hash=hash_token(secret)))
    click.echo(secret)


@token.command("list")
def token_list() -> None:
    app = _app()
    migrate(app)
    with _db(app).read() as session:
        for row in session.scalars(sa.select(Token).order_by(Token.name)):
            state = f"revoked {row.revoked_at:%Y-%m-%d}" if row.revoked_at else "active"
            used = f"{row.last_used_at:%Y-%m-%d %H:%M}" if row.last_used_at else "never"
            click.echo(f"{row.name}\t{row.role}\t{state}\tlast used {used}")


@token.command("revoke")
@click.argument("name")
def token_revoke(name: str) -> None:
    app = _app()
    migrate(app)
    with _db(app).write() as session:
        row = session.scalar(sa.select(Token).where(Token.name == name))
        if row is None:
            raise click.ClickException(f"no token named {name!r}")
        row.revoked_at = row.revoked_at or utcnow()
        # Free the name for a replacement while keeping the row for the record.
        row.name = f"{name}~revoked~{row.id}"
    click.echo(f"revoked {name}")


if __name__ == "__main__":
    main()
