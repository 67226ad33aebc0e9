"""`commonplace publish`: build the site, write what changed, say what happened."""

from __future__ import annotations

from pathlib import Path

import click

from app import upgrades
from app.publishing import feed, output, preview, site


def publish(app, folder: Path, base_url: str, title: str, serve: bool) -> None:
    db, config = app.extensions["db"], app.config
    if upgrades.pending_migrations(db):  # it only reads: migrating is the server's to do
        raise click.ClickException("the database is not up to date: run "
                                   "`commonplace db upgrade` (or start the server) first")
    try:
        base = feed.check_base_url(base_url) if base_url else ""
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    options = site.Options(Path(config["DATA_DIR"]), base, title, config["PRIVATE_TAGS"])
    with db.read() as session:
        files = site.build(session, options)
    try:
        done = output.write(folder, files)
    except output.NotOurs as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"published {len(files)} files to {folder}: {len(done.written)} written, "
               f"{len(done.removed)} removed, {done.unchanged} unchanged")
    if not base:
        click.echo("no Atom feed: its links must be absolute, so it needs the site's "
                   "address; give --base-url https://…", err=True)
    if serve:
        preview.serve(folder, lambda url: click.echo(f"previewing at {url} (Ctrl-C stops)"))
