"""the notebook's own version (issue 14). The pages kept between views and the counts over
the whole notebook (app/web/pages/kept.py, app/notebook/browse.py) were keyed by SQLite's
`PRAGMA data_version`, which moves on any commit to the database: a runner's long poll
(every half second, `commonplace up` always starts one), a token's last use, a run's
progress. So they were thrown away all the time, and the site map recounted every tag of
the notebook on every view (86 ms at 100k entries, against 3 ms kept).

notebook_version.n moves with every row written to `entry`, by triggers, whichever
connection or process writes it. A page's links and tags are written only with their
entry, in the same transaction (app/notebook/entries.py, bulk_import.py), so the entry
table is where a change to anything a kept page shows lands.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01
"""

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

EVENTS = ("insert", "update", "delete")


def upgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    op.execute("CREATE TABLE notebook_version (id INTEGER PRIMARY KEY CHECK (id = 1), "
               "n INTEGER NOT NULL)")
    op.execute("INSERT INTO notebook_version (id, n) VALUES (1, 0)")
    for event in EVENTS:
        op.execute(f"CREATE TRIGGER notebook_version_{event} AFTER {event.upper()} ON entry "
                   "BEGIN UPDATE notebook_version SET n = n + 1; END")


def downgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    for event in EVENTS:
        op.execute(f"DROP TRIGGER notebook_version_{event}")
    op.execute("DROP TABLE notebook_version")
