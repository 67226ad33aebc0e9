"""Alembic environment. `commonplace db upgrade` passes its own connection in
config.attributes; plain `alembic` (from the repository root) reads the URL from the
environment like the app does."""

from alembic import context

from app.config import from_environment
from app.models import Base

config = context.config
target_metadata = Base.metadata


def include_object(obj, name, type_, reflected, compare_to) -> bool:
    # The FTS5 index and its shadow tables are made by hand in 0001; autogenerate must
    # not offer to drop them.
    return not (type_ == "table" and name.startswith("entry_fts"))


def run_migrations(connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        include_object=include_object,
        render_as_batch=connection.dialect.name == "sqlite",  # SQLite cannot ALTER much
    )
    context.run_migrations()


connection = config.attributes.get("connection")
if connection is not None:
    run_migrations(connection)
else:
    from app.db import create_engine

    engine = create_engine(from_environment()["DATABASE_URL"])
    with engine.begin() as conn:
        run_migrations(conn)
