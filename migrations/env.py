"""Alembic environment. `commonplace db upgrade` passes its own connection in
config.attributes; plain `alembic` (from the repository root) reads the URL from the
environment like the app does."""

from alembic import context

from app.config import from_environment
from app.models import Base

config = context.config
target_metadata = Base.metadata


def run_migrations(connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
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
