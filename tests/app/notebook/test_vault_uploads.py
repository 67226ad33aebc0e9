"""Files uploaded in the editor, out through `commonplace export` and back through
`commonplace import`: each upload a file beside the notes that Obsidian shows, each link to
one a link to that file, and the export imported into its own notebook changes nothing,
text for text; into a new notebook, the same text, and every link serves its file."""

from __future__ import annotations

import io
import re
from pathlib import PurePosixPath

import sqlalchemy as sa
from click.testing import CliRunner

from app import cli
from app.models import Attachment, Entry, Revision
from app.notebook import mirror, transfer, vault_uploads
from tests.app.notebook.test_vault_import import PNG, write

OTHER_PNG = PNG + b"another picture"  # a second paste, also called image.png
PDF = b"%PDF-1.4\n% a paper\n"


def _upload(client, entry_id: int, data: bytes, name: str) -> dict:
    answer = client.post(f"/api/v1/entries/{entry_id}/attachments",
                         data={"file": (io.BytesIO(data), name)})
    assert answer.status_code == 201
    return answer.get_json()


def _edit(client, entry: dict, body: str) -> None:
    answer = client.put(f"/api/v1/entries/{entry['id']}",
                        json={"body": body, "base_revision": entry["revision"]})
    assert answer.status_code == 200, answer.get_json()


def _notebook(db) -> tuple[list, int, list]:
    with db.read() as session:
        return (sorted((e.id, e.title, e.revision, e.body_md, e.body_html)
                       for e in session.scalars(sa.select(Entry))),
                session.scalar(sa.select(sa.func.count()).select_from(Revision)),
                sorted((a.sha256, a.filename, a.path)
                       for a in session.scalars(sa.select(Attachment))))


def test_uploads_leave_as_files_and_an_export_imports_back_unchanged(
        app, client, db, data_dir, tmp_path, monkeypatch, make_app):
    monkeypatch.setenv("COMMONPLACE_DATA_DIR", str(data_dir))
    monkeypatch.setenv("COMMONPLACE_TIMEZONE", "UTC")
    monkeypatch.delenv("COMMONPLACE_DATABASE_URL", raising=False)
    runner = CliRunner()
    # a note of a vault, one folder down, with a picture beside it linked the markdown way
    vault = tmp_path / "vault"
    write(vault, "Deep/Note.md", "a picture beside me: ![](pic.png)")
    write(vault, "Deep/pic.png", PNG)
    assert runner.invoke(cli.main, ["import", str(vault)]).exit_code == 0
    [imported] = client.get("/api/v1/entries?q=picture").get_json()["entries"]
    written = client.post("/api/v1/entries", json={"date": "2024-03-01", "title": "Pictures",
                                                   "body": "soon"}).get_json()
    first = _upload(client, written["id"], PNG, "image.png")
    second = _upload(client, written["id"], OTHER_PNG, "image.png")
    renamed = _upload(client, written["id"], PNG, "chart.png")  # stored once, two names
    paper = _upload(client, written["id"], PDF, "paper.pdf")
    body = (f"{first['markdown']} beside {second['markdown']}\n\n"
            f"- {renamed['markdown'].replace('![chart.png]', '![my chart]')}\n"
            f"- [the paper]({paper['url']}), `{first['url']}` in code too")
    _edit(client, written, body)
    _edit(client, client.get(f"/api/v1/entries/{imported['id']}").get_json(),
          f"a picture beside me: ![](pic.png)\n\nand a paste: {second['markdown']}")
    before = _notebook(db)

    out = tmp_path / "out"
    result = runner.invoke(cli.main, ["export", str(out)])
    assert result.exit_code == 0, result.output
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    sha, other = first["sha256"], second["sha256"]
    assert files == sorted([
        "Deep/Note.md", "Deep/pic.png", "Pictures.md", f"attachments/{sha}/image.png",
        f"attachments/{other}/image.png", f"attachments/{sha}/chart.png",
        f"attachments/{paper['sha256']}/paper.pdf"])
    text = (out / "Pictures.md").read_text()
    assert f"![image.png](attachments/{sha}/image.png)" in text
    assert f"- ![my chart](attachments/{sha}/chart.png)" in text
    assert f"[the paper](attachments/{paper['sha256']}/paper.pdf)" in text
    deep = (out / "Deep/Note.md").read_text()
    assert f"![image.png](../attachments/{other}/image.png)" in deep and "![](pic.png)" in deep
    # every link to a file reaches it from its note, as Obsidian and GitHub read it
    for note in ("Pictures.md", "Deep/Note.md"):
        for target in re.findall(r"\]\(([^)/][^)]*)\)", (out / note).read_text()):
            assert (out / PurePosixPath(note).parent / target).is_file(), target
    assert (out / f"attachments/{other}/image.png").read_bytes() == OTHER_PNG

    result = runner.invoke(cli.main, ["import", str(out)])
    assert result.exit_code == 0, result.output
    assert ("created 0, updated 0, unchanged 2, errors 0, skipped 0; attachments added 0, "
            "updated 0, unchanged 5") in result.output
    assert _notebook(db) == before
    assert "would be: created 0, updated 0, unchanged 2" in runner.invoke(
        cli.main, ["import", "--dry-run", str(out)]).output

    # into a new notebook: the same text, and each address serves its file
    back = make_app(DATA_DIR=tmp_path / "back",
                    DATABASE_URL=f"sqlite:///{tmp_path / 'back'}/commonplace.db")
    report = transfer.import_folder(back.extensions["db"], out, workers=0)
    assert (report.created, report.errors, report.warnings) == (2, [], [])
    assert report.attachments == {"added": 5}
    with back.extensions["db"].read() as session:
        bodies = sorted(session.scalars(sa.select(Entry.body_md)))
    assert bodies == sorted(row[3] for row in before[0])
    for url, data in ((first["url"], PNG), (second["url"], OTHER_PNG), (paper["url"], PDF)):
        assert back.test_client().get(url).data == data


def test_only_a_link_into_its_hash_folder_from_the_top_is_read_as_an_upload(tmp_path):
    sha = "ab" * 32
    assert vault_uploads.from_vault(f"![x](../attachments/{sha}/x.png)", "Deep/N.md") == (
        f"![x](/attachments/{sha}/x.png)")
    kept = [f"![x](attachments/{sha}/x.png)",  # from a note one folder down: Deep/attachments
            f"![x](attachments/{sha[:-1]}/x.png)", "![x](attachments/x.png)",
            f"![x](attachments/{sha}/a b.png)", f"![x](/attachments/{sha}/x.png)"]
    for text in kept:
        assert vault_uploads.from_vault(text, "Deep/N.md") == text
    # a file read back reads them so (mirror.parse_file), and its own links as written
    note = write(tmp_path, "Deep/N.md", f"![x](../attachments/{sha}/x.png) ![y](y.png)")
    assert mirror.parse_file(note, root=tmp_path).body == (
        f"![x](/attachments/{sha}/x.png) ![y](y.png)")


def test_a_file_changed_in_its_hash_folder_is_imported_and_said(tmp_path, db):
    sha = "cd" * 32
    write(tmp_path, f"attachments/{sha}/x.png", PNG)
    write(tmp_path, "N.md", f"![x](attachments/{sha}/x.png)")
    report = transfer.import_folder(db, tmp_path, workers=0)
    assert report.attachments == {"added": 1} and report.created == 1
    assert [w for w in report.warnings if "not the content its folder names" in w]
