"""imported files keep their place: an entry remembers the file it came from (its path
inside the imported folder, unique) and that file's name as a link key, so an import finds
it again by path and never by title or date, and [[Folder/Note]] links resolve as Obsidian
resolves them; a note's `aliases:` are rows of entry_alias; an attachment imported from a
folder keeps its path there and its name as a key, for ![[image.png]]. And an entry's
#tags written in its text are kept beside its tags field (body_tags), filled here from
entry_tag, so that pages, the API and the feed show every tag it is found by. A link row
keeps its target's page only ([[Note#Heading]] reaches Note): rows kept before are cut so.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-05
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("entry", sa.Column("source_path", sa.String(1000), nullable=True))
    op.add_column("entry", sa.Column("name_key", sa.String(200), nullable=True))
    op.add_column("entry", sa.Column("body_tags", sa.String(1000), nullable=False,
                                     server_default=""))
    conn = op.get_bind()
    fields = dict(conn.execute(sa.text("SELECT id, tags FROM entry")).all())
    found: dict[int, list[str]] = {}
    for entry_id, tag in conn.execute(sa.text("SELECT entry_id, tag FROM entry_tag "
                                              "ORDER BY entry_id, tag")):
        if tag not in fields.get(entry_id, "").split():
            found.setdefault(entry_id, []).append(tag)
    if found:
        conn.execute(sa.text("UPDATE entry SET body_tags = :tags WHERE id = :id"),
                     [{"id": i, "tags": " ".join(tags)[:1000].rsplit(" ", 1)[0]
                       if len(" ".join(tags)) > 1000 else " ".join(tags)}
                      for i, tags in found.items()])
    links = conn.execute(sa.text("SELECT id, target_key FROM link "
                                 "WHERE instr(target_key, '#') > 0")).all()
    if links:  # models.link_key of the part before "#", as of this revision
        conn.execute(sa.text("UPDATE link SET target_key = :key WHERE id = :id"),
                     [{"id": i, "key": " ".join(key.split("#", 1)[0].split())}
                      for i, key in links])
    op.create_index("ix_entry_source_path", "entry", ["source_path"], unique=True)
    op.create_index("ix_entry_name_key", "entry", ["name_key"])
    op.create_table(
        "entry_alias",
        sa.Column("entry_id", sa.Integer, sa.ForeignKey("entry.id", ondelete="CASCADE"),
                  primary_key=True),
        sa.Column("key", sa.String(200), primary_key=True),
    )
    op.create_index("ix_entry_alias_key", "entry_alias", ["key"])
    op.add_column("attachment", sa.Column("path", sa.String(1000), nullable=True))
    op.add_column("attachment", sa.Column("name_key", sa.String(200), nullable=True))
    op.create_index("ix_attachment_path", "attachment", ["path"], unique=True)
    op.create_index("ix_attachment_name_key", "attachment", ["name_key"])


def downgrade() -> None:
    op.drop_index("ix_attachment_name_key", table_name="attachment")
    op.drop_index("ix_attachment_path", table_name="attachment")
    op.drop_column("attachment", "name_key")
    op.drop_column("attachment", "path")
    op.drop_index("ix_entry_alias_key", table_name="entry_alias")
    op.drop_table("entry_alias")
    op.drop_index("ix_entry_name_key", table_name="entry")
    op.drop_index("ix_entry_source_path", table_name="entry")
    op.drop_column("entry", "body_tags")
    op.drop_column("entry", "name_key")  # ALTER TABLE DROP COLUMN: the table's triggers stay
    op.drop_column("entry", "source_path")
