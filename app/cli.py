"""The `commonplace` command: run the processes, migrate, move plain files in and out,
manage tokens. Client commands (note, week, search, run …) come with the API client.

The top of the layers: it builds the app and starts each process. Each command imports
what it uses: `commonplace runner` (which `up` starts too) loads click, the config and
jobs/runner, and neither Flask, SQLAlchemy nor the notebook (a runner host does not need
the server, and it starts in a fifth of the time); `commonplace web` never loads
APScheduler (tests/app/test_deploy.py checks both); `commonplace scheduler` becomes
`python -m app.scheduler` (no click, no Flask), and `up` becomes app/supervisor.py,
the standard library only, once the notebook is ready (tests/app/test_process_imports.py)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import click

from app import supervisor
from app.config import from_environment, listen_addresses
from app.supervisor import SCHEDULER_COMMAND, gunicorn_argv, web_environment


def _app():
    from app import create_app

    return create_app()


def _db(app):
    return app.extensions["db"]


def _migrated_db():
    app = _app()
    migrate(app)
    return _db(app)


def migrate(app) -> None:
    """`app`: the web app or the backend (create_backend), which hold the same settings
    and database."""
    from app import upgrades
    from app.notebook import rerender

    database = _db(app)
    backup = upgrades.upgrade(database, Path(app.config["DATA_DIR"]) / "backups")
    if backup:
        click.echo(f"backed up the database to {backup}")
    rendered = rerender.refresh_all(database)
    if rendered:
        click.echo(f"rendered {rendered} notes again for the new renderer")


def _ensure_this_week(app) -> None:
    from app.notebook.letters import ensure_this_week

    if ensure_this_week(_db(app), app.config["TIMEZONE"])[1]:
        click.echo("created this week's letter")


# A unix socket's path must fit sockaddr_un.sun_path (108 bytes on Linux, with its NUL).
MAX_SOCKET_PATH = 107


def _listen(config: dict, allow_non_loopback: bool) -> list[str]:
    """The web's addresses, checked; in serve mode the socket's folder is made first (only
    this user may enter it: tailscaled, as root, still can)."""
    from app.port_holder import bind_problem, port_problem

    problem = (bind_problem(config["BIND"], config["AUTH_MODE"], allow_non_loopback)
               or port_problem(config["BIND"]))
    if problem:
        raise click.UsageError(problem)
    if config["AUTH_MODE"] == "serve":
        path = Path(config["SERVE_SOCKET"])
        if len(os.fsencode(path)) > MAX_SOCKET_PATH:
            raise click.UsageError(f"COMMONPLACE_SERVE_SOCKET={path} is longer than a unix "
                                   f"socket path may be ({MAX_SOCKET_PATH} bytes); choose a "
                                   "shorter one, e.g. /run/commonplace/web.sock")
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    return listen_addresses(config)


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
    addresses = _listen(app.config, allow_non_loopback)
    migrate(app)
    _ensure_this_week(app)
    if app.config["AUTH_MODE"] == "dev":
        click.secho("dev mode: loopback is the owner (set COMMONPLACE_OWNERS for tailnet use)",
                    fg="yellow", err=True)
    host, _, port = bind.rpartition(":")
    local = f"http://{'127.0.0.1' if host in ('0.0.0.0', '', '::') else host}:{port}"
    # The local runner talks to the TCP address with its token, like any other runner. It
    # runs as you and could read the notebook's files itself: `up` keeps the runner off
    # the serve socket, but the boundary is your user (docs/SECURITY.md).
    env = {**os.environ, supervisor.RUNNER_TOKEN: _local_runner_token(app)}
    click.echo(f"Commonplace is running at http://{bind}/  (data in {app.config['DATA_DIR']})")
    if app.config["AUTH_MODE"] == "serve":
        click.echo(f"put it on your tailnet with: tailscale serve --bg "
                   f"unix:{app.config['SERVE_SOCKET']}")
    # Then this process becomes the supervisor, which starts the web (on the addresses
    # _listen checked), the scheduler and the runner, and watches them: what it loaded to
    # get the notebook ready (Flask, SQLAlchemy, Alembic, the renderer) is gone with exec.
    _db(app).engine.dispose()
    sys.stdout.flush()
    sys.stderr.flush()
    argv = supervisor.command(local, addresses)
    os.execve(argv[0], argv, env)


def _local_runner_token(app) -> str:
    """A fresh runner token for the runner `up` starts; the previous one stops working."""
    from app.web.auth import tokens

    return tokens.rotate(_db(app), "local", "runner")


@main.command()
@click.option("--allow-non-loopback", is_flag=True, envvar="COMMONPLACE_ALLOW_NON_LOOPBACK",
              help="Listen on a non-loopback COMMONPLACE_BIND (the tailnet address, whois mode).")
def web(allow_non_loopback: bool) -> None:
    """The web process alone: gunicorn on COMMONPLACE_BIND (loopback unless told otherwise)
    and, in serve mode, on COMMONPLACE_SERVE_SOCKET for `tailscale serve`."""
    # The settings, not the app: gunicorn's master makes the app (and the data folder), and
    # this process, which only checks where it may listen, need not load the web first.
    addresses = _listen(from_environment(), allow_non_loopback)
    os.execve(sys.executable, gunicorn_argv(addresses), web_environment(os.environ))


@main.command()
def scheduler() -> None:
    """The scheduler process alone: schedules, reaper, cards into letters, backups."""
    # It becomes the scheduler's own entry (app/scheduler.py), which serves no page and holds
    # neither click nor Flask for the days it runs.
    argv = SCHEDULER_COMMAND
    os.execv(argv[0], argv)


@main.command()
@click.option("--server", required=True, help="the notebook's URL, e.g. https://notes.example.ts.net")
@click.option("--token", envvar="COMMONPLACE_RUNNER_TOKEN", required=True,
              help="a token of role runner (or set COMMONPLACE_RUNNER_TOKEN)")
@click.option("--work-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="where runs write their files [default: <data>/runner]")
@click.option("--advertise", envvar="COMMONPLACE_RUNNER_ADVERTISE", default="127.0.0.1",
              show_default=True, help="the address other hosts reach this one at, for runs "
              "that span hosts (its tailnet IP, e.g. `tailscale ip -4`)")
@click.option("--rdzv-port", envvar="COMMONPLACE_RUNNER_RDZV_PORT", type=int, default=0,
              help="the rendezvous port this host offers as node 0 [default: a free one]")
@click.option("--poll-wait", envvar="COMMONPLACE_RUNNER_POLL_WAIT",
              type=click.IntRange(1, 30), default=10, show_default=True,
              help="seconds each long poll for work may wait on the server: also how long "
                   "an idle runner may take to stop")
def runner(server: str, token: str, work_dir: Path | None, advertise: str,
           rdzv_port: int, poll_wait: int) -> None:
    """A runner agent: pulls runs from the server and executes them (GPU or CPU host)."""
    from jobs.runner import main as run_agent  # the agent needs nothing of the server

    folder = work_dir or Path(from_environment()["DATA_DIR"]) / "runner"
    folder.mkdir(parents=True, exist_ok=True)
    run_agent(server, token, folder, advertise=advertise, rdzv_port=rdzv_port,
              poll_wait=poll_wait)


@main.group()
def db() -> None:
    """Database maintenance."""


@db.command("upgrade")
def db_upgrade() -> None:
    """Back up the SQLite file, then apply pending migrations."""
    # The backend, not the web app: migrating serves no page, and the scheduler runs this
    # in a child at every start, which need not load Flask and the web layer for it.
    from app import create_backend

    migrate(create_backend())
    click.echo("database is up to date")


@main.command("import")
@click.argument("folder", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--dry-run", is_flag=True, help="say what the import would do; change nothing")
def import_cmd(folder: Path, dry_run: bool) -> None:
    """Import a folder of markdown files (an Obsidian vault as it is): an entry per file,
    an attachment per other file. Run it again after edits or an interruption."""
    from app.notebook.transfer import import_folder

    report = import_folder(_migrated_db(), folder, dry_run=dry_run,
                           progress=None if dry_run else _import_progress(time.monotonic()))
    for line in report.plan:
        click.echo(line)
    attached = report.attachments
    would = "would be: " if dry_run else ""
    click.echo(f"{would}created {report.created}, updated {report.updated}, "
               f"unchanged {report.unchanged}, errors {len(report.errors)}, "
               f"skipped {len(report.skipped)}; attachments added {attached.get('added', 0)}, "
               f"updated {attached.get('updated', 0)}, unchanged {attached.get('unchanged', 0)}"
               + ("" if dry_run else f" in {report.seconds:.1f} s "
                  f"({report.per_second:.0f} entries/s)"))
    for line in ([f"skipped {s}" for s in report.skipped] + [f"note: {w}" for w in
                                                             report.warnings] + report.errors):
        click.echo(f"  {line}", err=True)
    if report.errors:
        raise SystemExit(1)


def _import_progress(started: float):
    """A bar on stderr when it is a terminal, else a line every tenth of the way."""
    tty, shown = sys.stderr.isatty(), [-1]

    def show(done: int, total: int) -> None:
        rate = done / max(time.monotonic() - started, 1e-9)
        if tty:
            bar = "#" * (30 * done // max(total, 1))
            end = "\n" if done >= total else ""
            click.echo(f"\r[{bar:<30}] {done}/{total} {rate:.0f}/s", nl=False, err=True)
            click.echo(end, nl=False, err=True)
        elif 10 * done // max(total, 1) > shown[0]:
            shown[0] = 10 * done // max(total, 1)
            click.echo(f"imported {done}/{total} ({rate:.0f}/s)", err=True)

    return show


@main.command("export")
@click.argument("folder", type=click.Path(file_okay=False, path_type=Path))
def export_cmd(folder: Path) -> None:
    """Write the notebook under FOLDER as a vault Obsidian opens: a markdown file per entry,
    named by its title, with front matter, and its attachments beside them."""
    from app.notebook.vault import export_vault

    notes, files = export_vault(_migrated_db(), folder)
    click.echo(f"exported {notes} entries and {files} attachments to {folder}")


@main.command("publish")
@click.option("--to", "folder", required=True, type=click.Path(file_okay=False, path_type=Path))
@click.option("--base-url", default="", help="the site's address: the Atom feed needs it")
@click.option("--title", default="Commonplace", show_default=True, help="the site's name")
@click.option("--serve", is_flag=True, help="then preview it on 127.0.0.1 (Ctrl-C stops)")
def publish_cmd(folder: Path, base_url: str, title: str, serve: bool) -> None:
    """Write the entries marked publish: true as a static site (docs/PUBLISHING.md)."""
    from app.publishing.command import publish

    publish(_app(), folder, base_url, title, serve)


@main.command("backup")
@click.option("--to", "dest", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="the archive to write [default: <data>/backups/…-manual.tar.gz]")
@click.option("--verify", "check", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              default=None, help="only check an archive (every checksum, the database)")
def backup_cmd(dest: Path | None, check: Path | None) -> None:
    """One archive of everything: the database (copied online, safe while the notebook
    runs), attachments, run logs and artifacts, with a manifest of checksums.

    \b
    commonplace backup                       into <data>/backups/
    commonplace backup --to /mnt/usb/notes.tar.gz
    commonplace backup --verify notes.tar.gz
    """
    from app import backups

    if check is not None:
        try:
            manifest = backups.verify(check)
        except backups.BackupError as exc:
            raise click.ClickException(str(exc)) from None
        click.echo(f"{check}: good ({_summary(manifest)}, schema {manifest.schema_revision}, "
                   f"made {manifest.created_at})")
        return
    app = _app()
    migrate(app)
    database = _db(app).sqlite_path
    if database is None:
        raise click.ClickException("commonplace backup archives a SQLite notebook; for another "
                                   "database use its own backup tool (docs/DEPLOY.md)")
    data_dir = Path(app.config["DATA_DIR"])
    path, manifest = backups.create(database, data_dir, data_dir / "backups", reason="manual",
                                    dest=dest)
    click.echo(f"backed up {_summary(manifest)} to {path}")


@main.command("restore")
@click.argument("archive", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="where to restore [default: COMMONPLACE_DATA_DIR]")
@click.option("--force", is_flag=True,
              help="restore over a data dir that is not empty (it is moved aside, not deleted)")
def restore_cmd(archive: Path, data_dir: Path | None, force: bool) -> None:
    """Put a backup archive's notebook in place: checks every member first, refuses a data
    dir with something in it unless --force (then moves it aside), migrates an archive made
    by an older version, and writes the markdown mirror anew. Stop the web, scheduler and
    runner first.

    \b
    commonplace restore notes.tar.gz --data-dir ~/.local/share/commonplace-restored
    """
    from app import backups, create_app
    from app.notebook.transfer import mirror_folder

    if os.environ.get("COMMONPLACE_DATABASE_URL"):
        raise click.ClickException("restore puts a SQLite notebook in a data dir; unset "
                                   "COMMONPLACE_DATABASE_URL (another database restores with "
                                   "its own tools)")
    target = (data_dir or Path(from_environment()["DATA_DIR"])).expanduser()
    try:
        manifest, aside = backups.restore(archive, target, force=force)
    except backups.BackupError as exc:
        raise click.ClickException(str(exc)) from None
    if aside is not None:
        click.echo(f"moved the previous data dir aside to {aside}")
    app = create_app({"DATA_DIR": target,
                      "DATABASE_URL": f"sqlite:///{target / backups.DATABASE}"})
    migrate(app)
    written = mirror_folder(_db(app), target / "notes")
    click.echo(f"restored {_summary(manifest)} (schema {manifest.schema_revision}, made "
               f"{manifest.created_at}) into {target}; wrote {written} markdown files")


def _summary(manifest) -> str:
    counts = manifest.counts
    return (f"{counts.get('entry', 0)} entries, {counts.get('revision', 0)} revisions, "
            f"{counts.get('attachment', 0)} attachments, {counts.get('run', 0)} runs, "
            f"{len(manifest.files) - 1} files")


@main.group()
def token() -> None:
    """Bearer tokens for the CLI, scripts, feed readers and runners."""


@token.command("create")
@click.argument("name")
@click.option("--role", type=click.Choice(["owner", "viewer", "runner", "feed"]),
              default="owner", show_default=True)
def token_create(name: str, role: str) -> None:
    """Create a token; it is shown once and stored only as a hash."""
    from app.web.auth import tokens

    try:
        click.echo(tokens.create(_migrated_db(), name, role))
    except tokens.TokenError as exc:
        raise click.ClickException(str(exc)) from None


@token.command("list")
def token_list() -> None:
    from app.web.auth import tokens

    for line in tokens.listing(_migrated_db()):
        click.echo(line)


@token.command("revoke")
@click.argument("name")
def token_revoke(name: str) -> None:
    from app.web.auth import tokens

    try:
        tokens.revoke(_migrated_db(), name)
    except tokens.TokenError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"revoked {name}")


if __name__ == "__main__":
    main()
