"""link keys and imported paths composed (NFC). macOS writes "é" in a file name as "e" and
an accent (NFD), where a link typed there holds one character: a vault's "Café notes.md"
came in under a key no [[Café notes]] matched, and its "Résumé.png" under a path no
![[Résumé.png]] found. models.link_key now composes what it makes; the keys stored before
(titles, file names, aliases, link targets) and the imported paths (an entry's
source_path, an attachment's path, by which the next import finds them again) are
composed here, and the stored HTML is rendered again (rerender runs when the renderer's
version is unknown) so the links it showed as missing resolve.

Downgrade changes nothing: the composed forms are what the earlier code makes of a link
typed composed, so it reads them as before, and the decomposed forms are not kept to be
put back (an import of the folder finds its files again under either form).

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
    ("entry", "id", "title_key"), ("entry", "id", "name_key"), ("entry", "id", "source_path"),
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
