"""link keys, imported paths and titles composed (NFC). macOS writes "é" in a file name
as "e" and an accent (NFD), where a link typed there holds one character: a vault's
"Café notes.md" came in under a key no [[Café notes]] matched, and its "Résumé.png"
under a path no ![[Résumé.png]] found. models.link_key now composes what it makes, and an
import the names it reads (note_paths.in_folder). Composed here: the keys stored before
(titles, file names, aliases, link targets), the imported paths (an entry's source_path,
an attachment's path, by which the next import finds them again) and the titles (with
their rows in the search index), so the next import of the vault changes nothing; and
the stored HTML is rendered again (rerender runs when the renderer's version is
unknown), so the links it showed as missing resolve. A revision keeps its title as saved.

Downgrade changes nothing, because nothing records which values were decomposed: the
earlier code reads the composed keys as it reads any (a link typed composed reaches
them), but its import of a Mac folder reads the names decomposed again, so it would not
find the entries those files made.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-05
"""

import unicodedata

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

# (table, row identity, column): the columns that hold a key or an imported path
_COLUMNS = [
    ("entry", "id", "title"), ("entry", "id", "title_key"), ("entry", "id", "name_key"),
    ("entry", "id", "source_path"),
    ("link", "id", "target_key"),
    ("attachment", "id", "path"), ("attachment", "id", "name_key"),
]


def _nfc(text: str) -> str:
    return unicodedata.normalize("NFC", text)


def upgrade() -> None:
    conn = op.get_bind()
    for table, key, column in _COLUMNS:
        rows = conn.execute(sa.text(f"SELECT {key}, {column} FROM {table} "
                                    f"WHERE {column} IS NOT NULL")).all()
        taken, changed = {value for _, value in rows}, []
        # a path is unique: of two files whose names differ only so (possible on Linux),
        # the decomposed one's stays as it was
        unique = column in ("path", "source_path")
        for row_id, value in rows:
            composed = _nfc(value)
            if composed != value and not (unique and composed in taken):
                taken.add(composed)
                changed.append({"id": row_id, "value": composed})
        if changed:
            conn.execute(sa.text(f"UPDATE {table} SET {column} = :value WHERE {key} = :id"),
                         changed)
        if changed and column == "title" and conn.dialect.name == "sqlite":
            # entry_fts_heads follows entry by its trigger; these two hold their own text
            for index in ("entry_fts", "entry_fts_recent"):
                conn.execute(sa.text(f"UPDATE {index} SET title = :value WHERE rowid = :id"),
                             changed)
    # an alias is part of its row's key: composed, it may equal one the entry has already
    aliases = conn.execute(sa.text("SELECT entry_id, key FROM entry_alias")).all()
    present = {(entry_id, key) for entry_id, key in aliases}
    for entry_id, key in aliases:
        composed = _nfc(key)
        if composed == key:
            continue
        conn.execute(sa.text("DELETE FROM entry_alias WHERE entry_id = :e AND key = :k"),
                     {"e": entry_id, "k": key})
        if (entry_id, composed) not in present:
            present.add((entry_id, composed))
            conn.execute(sa.text("INSERT INTO entry_alias (entry_id, key) VALUES (:e, :k)"),
                         {"e": entry_id, "k": composed})
    conn.execute(sa.text("DELETE FROM setting WHERE key = 'render_version'"))


def downgrade() -> None:
    pass  # see the module's docstring: nothing to undo
