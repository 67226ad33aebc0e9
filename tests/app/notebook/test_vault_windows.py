"""An export that Windows can write: a note titled as one of its devices (CON, PRN, AUX,
NUL, COM1-9, LPT1-9, with or without a dot after), or imported under such a path or a
folder ending in a dot, and an attachment so named, get names Windows can create; the
links and embeds in the exported notes reach the files so named, as Obsidian finds them;
and it all imports back as the same notes, into another notebook or its own."""

from __future__ import annotations

import re

import sqlalchemy as sa

from app.models import Entry
from app.notebook import entries, mirror, transfer, vault
from tests.app.notebook.test_vault_import import PNG, linked, write

DEVICE = re.compile(r"(?i)(con|prn|aux|nul|com[1-9]|lpt[1-9]) *(\..*)?")


def test_device_names_are_written_as_names_windows_can_create(tmp_path, make_app):
    folder = tmp_path / "vault"
    write(folder, "Sub/NUL.md", "imported under a device's name")
    write(folder, "com1/inside.md", "in a folder named as one")
    write(folder, "dotted./note.md", "in a folder ending in a dot")
    write(folder, "aux.png", PNG)
    db = make_app().extensions["db"]
    transfer.import_folder(db, folder, workers=0)
    with db.write() as session:
        for day, title in enumerate(("CON", "lpt9", "aux.txt", "Prn "), start=1):
            entries.create(session, author="x", date=f"2024-03-0{day}", title=title,
                           body=f"note {title}")
        entries.create(session, author="x", date="2024-03-09", title="Links",
                       body="[[CON]] [[aux.txt]] [[NUL]] [[CON#Top|the top]] ![[aux.png|64]]")
        # a link written as the export would write one: left alone, so it reads back as is
        entries.create(session, author="x", date="2024-03-10", title="Held",
                       body="[[LPT1_|LPT1]] and [[LPT1]]")
    out = tmp_path / "out"
    assert vault.export_vault(db, out) == (9, 1)
    names = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert names == ["CON_.md", "Held.md", "Links.md", "Prn_.md", "Sub/NUL_.md",
                     "aux_.png", "aux_.txt.md", "com1_/inside.md", "dotted/note.md",
                     "lpt9_.md"]
    for name in names:
        assert not any(DEVICE.fullmatch(part) or part.endswith((".", " "))
                       for part in name.split("/")), name
    # each link reaches its file as Obsidian finds one (by its name), showing what it did
    text = (out / "Links.md").read_text()
    assert text.endswith("[[CON_|CON]] [[aux_.txt|aux.txt]] [[NUL_|NUL]] [[CON_#Top|the top]] "
                         "![[aux_.png|64]]\n")
    stems = {n.rsplit("/", 1)[-1].removesuffix(".md") for n in names}
    for target in re.findall(r"\[\[([^|#\]]+)", text.split("\n---\n", 1)[1]):
        assert target in stems or f"{target}.md" in names, target
    assert (out / "Held.md").read_text().endswith("[[LPT1_|LPT1]] and [[LPT1]]\n")

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
    assert (report.created, report.errors, report.attachments) == (9, [], {"added": 1})
    assert notebook(back.extensions["db"]) == notebook(db)
    links = next(row for row in notebook(db) if row[0] == "Links")
    assert links[3] == ("CON", "aux.txt", "NUL", "CON")  # each link reaches its note
    for each in (db, back.extensions["db"]):  # and the embed its image, in both notebooks
        with each.read() as session:
            html = session.scalar(sa.select(Entry.body_html).where(Entry.title == "Links"))
        assert re.search(r'<img [^>]*src="/attachments/[0-9a-f]{64}/aux_?\.png"', html)
    # its own notebook finds each file's entry again: nothing changes
    report = transfer.import_folder(db, out, workers=0)
    assert (report.created, report.updated, report.unchanged, report.errors,
            report.attachments) == (0, 0, 9, [], {"unchanged": 1})


def test_only_links_listed_as_an_export_rewrote_them_are_read_back(tmp_path):
    """`commonplace-links:` is the export's: a pair that is not one link for another, or a
    value that is not a mapping, changes nothing, and the key is never kept as the note's."""
    listed = "commonplace-links:\n  '[[CON_|CON]]': '[[CON]]'\n  '[[a]]': not a link\n"
    note = write(tmp_path, "note.md", f"---\n{listed}---\n[[CON_|CON]] [[a]] [[CON_]]")
    parsed = mirror.parse_file(note)
    assert (parsed.body, parsed.front_matter) == ("[[CON]] [[a]] [[CON_]]", None)
    for junk in ("[1, 2]", "text", "{'[[a]]': 5}", "{'[[a]]': '[[b]]\n[[c]]'}"):
        note = write(tmp_path, "junk.md", f"---\ncommonplace-links: {junk!s}\n---\n[[a]]")
        assert mirror.parse_file(note).body == "[[a]]", junk
