"""An export that Windows can write: a note titled as one of its devices (CON, PRN, AUX,
NUL, COM1-9, LPT1-9, with or without a dot after), or imported under such a path or a
folder ending in a dot, gets a name Windows can create, and still imports back as the same
note, into another notebook or its own."""

from __future__ import annotations

import re

import sqlalchemy as sa

from app.models import Entry
from app.notebook import entries, transfer, vault
from tests.app.notebook.test_vault_import import linked, write

DEVICE = re.compile(r"(?i)(con|prn|aux|nul|com[1-9]|lpt[1-9]) *(\..*)?")


def test_device_names_are_written_as_names_windows_can_create(tmp_path, make_app):
    folder = tmp_path / "vault"
    write(folder, "Sub/NUL.md", "imported under a device's name")
    write(folder, "com1/inside.md", "in a folder named as one")
    write(folder, "dotted./note.md", "in a folder ending in a dot")
    db = make_app().extensions["db"]
    transfer.import_folder(db, folder, workers=0)
    with db.write() as session:
        for day, title in enumerate(("CON", "lpt9", "aux.txt", "Prn "), start=1):
            entries.create(session, author="x", date=f"2024-03-0{day}", title=title,
                           body=f"note {title}")
        entries.create(session, author="x", date="2024-03-09", title="Links",
                       body="[[CON]] [[aux.txt]] [[NUL]]")
    out = tmp_path / "out"
    assert vault.export_vault(db, out) == (8, 0)
    names = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.md"))
    assert names == ["CON_.md", "Links.md", "Prn_.md", "Sub/NUL_.md", "aux_.txt.md",
                     "com1_/inside.md", "dotted/note.md", "lpt9_.md"]
    for name in names:
        assert not any(DEVICE.fullmatch(part) or part.endswith((".", " "))
                       for part in name.split("/")), name

    def notebook(db):
        with db.read() as session:
            rows = session.scalars(sa.select(Entry)).all()
            titles = {e.id: e.title for e in rows}
            return sorted((e.title, e.date, e.body_md, tuple(
                titles.get(int(h.split("/")[2])) for c, h in linked(e.body_html)
                if c == "wikilink")) for e in rows)

    # another notebook reads the same notes, titles and links
    back = make_app(DATA_DIR=tmp_path / "back",
                    DATABASE_URL=f"sqlite:///{tmp_path / 'back'}/commonplace.db")
    report = transfer.import_folder(back.extensions["db"], out, workers=0)
    assert (report.created, report.errors) == (8, [])
    assert notebook(back.extensions["db"]) == notebook(db)
    links = next(row for row in notebook(db) if row[0] == "Links")
    assert links[3] == ("CON", "aux.txt", "NUL")  # each link reaches its note
    # its own notebook finds each file's entry again: nothing changes
    report = transfer.import_folder(db, out, workers=0)
    assert (report.created, report.updated, report.unchanged, report.errors) == (0, 0, 8, [])
