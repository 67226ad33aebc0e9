"""Schema migrations (Alembic): what is pending, and applying it after a backup.

Only the processes that migrate import this (`commonplace up`, `db upgrade`, tests,
benches); app/db.py reaches it on first use of `db.upgrade` and friends, so the web worker
never loads Alembic. `backup` is the copy taken before a migration.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import sqlite3
from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config as AlembicConfig
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from app.db import MIGRATIONS_DIR, Database


def alembic_config(url: str) -> AlembicConfig:
    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def pending_migrations(db: Database) -> list[str]:
    script = ScriptDirectory.from_config(alembic_config(db.url))
    with db.engine.connect() as conn:
        current = set(MigrationContext.configure(conn).get_current_heads())
    head = script.get_current_head()
    if head in current:
        return []
    return [rev.revision for rev in script.iterate_revisions(head, tuple(current) or "base")]


def upgrade(db: Database, backup_dir: Path) -> Path | None:
    """Apply pending migrations, taking a backup of an existing SQLite file first.
    Returns the backup's path, or None when nothing needed doing or there was nothing to save."""
    if not pending_migrations(db):
        return None
    saved = None
    with db.engine.connect() as conn:
        has_tables = bool(sa.inspect(conn).get_table_names())
    if has_tables and db.url.startswith("sqlite"):
        saved = backup(db, backup_dir, reason="pre-upgrade")
    with db.engine.begin() as conn:
        cfg = alembic_config(db.url)
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")
    return saved


def backup(db: Database, backup_dir: Path, reason: str = "backup") -> Path:
    """Copy the SQLite database with the online backup API (consistent even while in use)."""
    source = sa.make_url(db.url).database
    backup_dir.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S%fZ")
    dest = backup_dir / f"commonplace-{stamp}-{reason}.db"
    with contextlib.closing(sqlite3.connect(source)) as src, contextlib.closing(
        sqlite3.connect(dest)
    ) as dst:
        src.backup(dst)
    return dest
