"""The bulk import (app/notebook/bulk_import.py) against the import it replaced, a save per
file (transfer.import_folder_slowly): the same folder gives the same rows, the same
rendered HTML, the same index and the same mirror files, in small batches through a real
process pool; and an import killed (SIGKILL) half way leaves a consistent notebook that a
second run completes to the same result as one uninterrupted import."""

from __future__ import annotations

import datetime as dt
import gc
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from app import create_app, upgrades
from app.models import Entry
from app.notebook import bulk_import, mirror, transfer
from tests.helpers import ROOT
from tests.journal_harness import processes_of, wait_until

TAGS = ["ml", "gpu", "home", "work/infra"]


def write(folder: Path, name: str, text: str) -> None:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def corpus(folder: Path, n: int = 120, seed: int = 3, twice: bool = True) -> None:
    """Notes linking back and forth (titles, dates, weeks, drafts), plus the odd cases."""
    rng = random.Random(seed)
    titles = [f"Note {rng.choice(['alpha', 'beta', 'Über'])} {i % 40}" for i in range(n)]
    for i in range(n):
        date = dt.date(2020, 1, 1) + dt.timedelta(days=i // 3)
        links = " ".join(f"[[{titles[rng.randrange(n)]}]]" for _ in range(rng.randint(0, 3)))
        extra = rng.choice(["", f"[[{date - dt.timedelta(days=2)}]]", "[[2020-W03|that week]]",
                            "[[Nobody wrote this]]", "#ideas", "\n\n```python\nx = 1\n```",
                            f"[[NOTE ÜBER {i % 40}]]"])
        status = "draft" if i % 17 == 0 else "published"
        tags = rng.sample(TAGS, rng.randint(0, 2))
        name = f"{date.year}/{date.isoformat()}-{titles[i].lower().replace(' ', '-')}-{i}.md"
        front = yaml.safe_dump({"title": titles[i], "date": date, "tags": tags, "status": status},
                               sort_keys=False, allow_unicode=True, default_flow_style=None)
        write(folder, name, f"---\n{front}---\n# {titles[i]}\n\n{links} {extra} done\n")
    write(folder, "2020/2020-W03.md", "---\ntitle: Week 2020-W03\ndate: 2020-01-13\n"
                                      "kind: week\nweek: 2020-W03\n---\nsee [[Note alpha 3]]\n")
    write(folder, "2020/2020-01-05-twice.md", "---\ntitle: Twice\n---\nfirst\n")
    if twice:  # a second file of the same title and date: a second entry
        write(folder, "2020/2020-01-05-twice-2.md", "---\ntitle: Twice\n---\nsecond [[Twice]]\n")
    write(folder, "2020/2020-01-06-run.md", "# Run\n\n```run\nid: 999\n```\n[[Twice]]\n")
    write(folder, "2020/2020-01-07-bad.md", "---\ntitle: Bad\ntags: ['9x']\n---\nx\n")
    write(folder, "2020/2020-01-08-broken.md", "---\ntitle: [unclosed\n---\nx\n")


def snapshot(data: Path) -> dict:
    """Everything an import leaves: rows (timestamps aside), the index, mirror files."""
    db = sqlite3.connect(data / "commonplace.db")
    tables = {
        "entry": "SELECT id, kind, date, iso_week, title, slug, body_md, body_html, toc_html, "
                 "tags, status, revision, title_key, body_tags, source_path, name_key FROM entry "
                 "ORDER BY id",
        "revision": "SELECT entry_id, number, date, title, body_md, tags, status, author, note "
                    "FROM revision ORDER BY entry_id, number",
        "link": "SELECT source_id, target_key, text, context FROM link "
                "ORDER BY source_id, target_key",
        "tag": "SELECT entry_id, tag FROM entry_tag ORDER BY entry_id, tag",
        "fts": "SELECT rowid, title, tags, body FROM entry_fts ORDER BY rowid",
    }
    found = {name: db.execute(sql).fetchall() for name, sql in tables.items()}
    # how the index merges: FTS5's default (4) unless an import is loading (search.py)
    found["automerge"] = [
        (table, (db.execute(f"SELECT v FROM {table}_config WHERE k = 'automerge'").fetchone()
                 or (4,))[0]) for table in ("entry_fts", "entry_fts_heads", "entry_fts_recent")]
    assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    # the recent entries' index: exactly entry_fts's rows from its floor on, and the letters
    # (search_index.py)
    assert db.execute("SELECT rowid, title, tags, body, kind FROM entry_fts_recent "
                      "ORDER BY rowid").fetchall() == db.execute(
        "SELECT rowid, title, tags, body, kind FROM entry_fts WHERE rowid >= "
        "(SELECT floor FROM search_recent) OR kind = 'cpletter' ORDER BY rowid").fetchall()
    db.close()
    notes = data / "notes"
    found["files"] = {str(p.relative_to(notes)): p.read_text() for p in notes.rglob("*.md")}
    return found


USUAL = [("entry_fts", 4), ("entry_fts_heads", 4), ("entry_fts_recent", 4)]


def differences(a: dict, b: dict) -> dict:
    return {name: [row for row in a[name] if row not in b[name]][:3] for name in a
            if a[name] != b[name]}


@pytest.fixture
def two(tmp_path, monkeypatch):
    """Two fresh notebooks; small batches, so a folder of 120 files makes many."""
    monkeypatch.setattr(bulk_import, "BATCH", 16)
    monkeypatch.setattr(bulk_import, "CHUNK", 5)

    def make(name):
        data = tmp_path / name
        app = create_app({"DATA_DIR": data, "DATABASE_URL": f"sqlite:///{data}/commonplace.db",
                          "AUTH_MODE": "dev", "OWNERS": [], "VIEWERS": [], "TIMEZONE": "UTC",
                          "TESTING": True})
        upgrades.upgrade(app.extensions["db"], data / "backups")
        return app.extensions["db"], data

    return make("slow"), make("bulk")


def test_bulk_import_equals_a_save_per_file(tmp_path, two):
    (slow, slow_dir), (bulk, bulk_dir) = two
    source = tmp_path / "in"
    corpus(source)
    seen = []
    a = transfer.import_folder_slowly(slow, source)
    b = transfer.import_folder(bulk, source, workers=2, progress=lambda d, t: seen.append((d, t)))
    assert (b.created, b.updated, b.unchanged) == (a.created, a.updated, a.unchanged)
    assert sorted(b.errors) == sorted(a.errors) == []
    assert sorted(b.warnings) == sorted(a.warnings) and len(a.warnings) == 2
    assert seen[-1] == (126, 126) and len(seen) > 5
    assert differences(snapshot(bulk_dir), snapshot(slow_dir)) == {}
    # the mirror gives the files back as they came in (the ones without front matter aside)
    out = tmp_path / "out"
    transfer.mirror_folder(bulk, out)
    exported = {p.read_text() for p in out.rglob("*.md")}
    notes = [p for p in source.rglob("*.md") if "title: Note" in p.read_text()]
    assert len(notes) == 120 and all(p.read_text() in exported for p in notes)


def test_a_note_shows_the_note_it_embeds_from_the_same_batch(tmp_path, two):
    # both embed something, so both are filled in by the writer: the first one filled
    # must still show the second, as a save per file does once the second is saved
    (slow, slow_dir), (bulk, bulk_dir) = two
    source = tmp_path / "in"
    write(source, "A.md", "![[Bee#Part]]\n")
    write(source, "Bee.md", "## Part\n\nbee's own words ![[shot.png]]\n")
    (source / "shot.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 32)
    transfer.import_folder_slowly(slow, source)
    transfer.import_folder(bulk, source, workers=2)
    found = snapshot(bulk_dir)["entry"]
    assert found == snapshot(slow_dir)["entry"]
    shown = {row[4]: row[7] for row in found}
    assert 'class="note-embed"' in shown["A"] and "bee's own words" in shown["A"]


def test_a_second_import_over_a_notebook_links_both_ways(tmp_path, two):
    """Half the folder first, then all of it changed a little: updates, new entries that
    entries from the first import link to, and nothing else moves."""
    (slow, slow_dir), (bulk, bulk_dir) = two
    source = tmp_path / "in"
    corpus(source)
    files = sorted(source.rglob("*.md"))
    half = tmp_path / "half"
    for path in files[::2]:
        write(half, str(path.relative_to(source)), path.read_text())
    for path in files[5::9]:
        path.write_text(path.read_text() + "\nmore [[Twice]]\n")
    for db in (slow, bulk):
        first = (transfer.import_folder_slowly if db is slow else transfer.import_folder)
        first(db, half)
    a = transfer.import_folder_slowly(slow, source)
    b = transfer.import_folder(bulk, source, workers=2)
    assert (b.created, b.updated, b.unchanged) == (a.created, a.updated, a.unchanged)
    assert a.updated > 0 and a.unchanged > 0
    assert differences(snapshot(bulk_dir), snapshot(slow_dir)) == {}
    # again: nothing changes
    again = transfer.import_folder(bulk, source, workers=0)
    slow_again = transfer.import_folder_slowly(slow, source)
    assert (again.created, again.updated) == (slow_again.created, slow_again.updated) == (0, 0)
    assert differences(snapshot(bulk_dir), snapshot(slow_dir)) == {}


def segments(data: Path) -> dict[int, set]:
    """entry_fts's segments: {segment id: its pages}. FTS5 numbers each %_data row
    segment << 37 | page (fts5Int.h, FTS5_SEGMENT_ROWID); rows below hold its config."""
    db = sqlite3.connect(data / "commonplace.db")
    found: dict[int, set] = {}
    for rowid, block in db.execute("SELECT id, block FROM entry_fts_data WHERE id >= ?",
                                   (1 << 37,)):
        found.setdefault(rowid >> 37, set()).add((rowid, block))
    db.close()
    return found


def test_a_large_import_leaves_one_segment_and_a_small_one_merges_nothing(tmp_path, two):
    """An import of many batches loads the index with merging put off, then merges it into
    one segment; an import of a few files (one batch) adds its segment and leaves the rest
    as it was: merging all of a large notebook's index took seconds."""
    _, (bulk, bulk_dir) = two  # batches of 16
    source = tmp_path / "in"
    corpus(source)
    transfer.import_folder(bulk, source, workers=0)
    assert len(segments(bulk_dir)) == 1
    assert snapshot(bulk_dir)["automerge"] == USUAL
    before = segments(bulk_dir)
    few = tmp_path / "few"
    for i in range(3):
        write(few, f"2021/2021-02-0{i + 1}-later.md", f"# Later {i}\n\nsee [[Twice]]\n")
    report = transfer.import_folder(bulk, few, workers=0)
    assert report.created == 3
    after = segments(bulk_dir)
    assert len(after) == 2 and all(after[seg] == pages for seg, pages in before.items())
    assert snapshot(bulk_dir)["automerge"] == USUAL


def test_an_import_puts_off_full_collections_and_gives_the_thresholds_back(tmp_path, two):
    """The parent holds the whole plan: while it imports, the oldest generation is collected
    rarely; after it, and after an import stopped by its caller (Ctrl-C), the
    interpreter's thresholds are as they were."""
    _, (bulk, _) = two
    source = tmp_path / "in"
    corpus(source)
    before = gc.get_threshold()
    during = []
    transfer.import_folder(bulk, source, workers=0,
                           progress=lambda done, total: during.append(gc.get_threshold()))
    assert len(during) > 1
    assert all(t == (*before[:2], bulk_import.OLDEST_GENERATION_AFTER) for t in during)
    assert gc.get_threshold() == before

    def interrupt(done, total):
        raise KeyboardInterrupt

    for i in range(40):
        write(source, f"2022/2022-03-{i % 28 + 1:02d}-more-{i}.md", f"# More {i}\n\n[[Twice]]\n")
    with pytest.raises(KeyboardInterrupt):
        transfer.import_folder(bulk, source, workers=0, progress=interrupt)
    assert gc.get_threshold() == before


# From its 40th entry on, the import takes 50 ms more a batch (its progress callback):
# ~1.6 s in which the test sees 40 entries and kills it. Without it a busy machine (CI's
# two test workers and a browser) could starve the test's polling until all 305 were in.
KILLED_IMPORT = """
import sys, time
from app import create_app
from app.notebook import bulk_import, transfer
bulk_import.BATCH = 8
app = create_app()
transfer.import_folder(app.extensions["db"], sys.argv[1], workers=1,
                       progress=lambda done, total: done >= 40 and time.sleep(0.05))
"""


def test_an_import_killed_half_way_is_consistent_and_a_rerun_finishes_it(tmp_path, two):
    (whole, whole_dir), (_, killed_dir) = two
    source = tmp_path / "in"
    corpus(source, n=300, twice=False)
    transfer.import_folder(whole, source, workers=0)
    env = {**os.environ, "COMMONPLACE_DATA_DIR": str(killed_dir), "COMMONPLACE_TIMEZONE": "UTC"}
    env.pop("COMMONPLACE_DATABASE_URL", None)
    child = subprocess.Popen([sys.executable, "-c", KILLED_IMPORT, str(source)], cwd=ROOT,
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    count, deadline = 0, time.monotonic() + 60
    while child.poll() is None and time.monotonic() < deadline:
        try:
            with sqlite3.connect(killed_dir / "commonplace.db", timeout=5) as db:
                count = db.execute("SELECT count(*) FROM entry").fetchone()[0]
        except sqlite3.OperationalError:
            pass
        if count >= 40:
            break
        time.sleep(0.005)
    child.send_signal(signal.SIGKILL)
    child.wait()
    # nothing of the killed import lives on: its pool's renderer ends with it
    wait_until("the killed import's renderer to end", lambda: not processes_of(source), 10)
    half = snapshot(killed_dir)
    assert 0 < len(half["entry"]) < 300, "the import finished before it could be killed"
    # consistent: each entry has its revisions, its index row, its HTML resolved as it
    # would be with only these entries in the notebook
    assert len(half["fts"]) == len(half["entry"])
    assert {(r[0], r[1]) for r in half["revision"]} == {
        (e[0], n) for e in half["entry"] for n in range(1, e[11] + 1)}
    assert all(e[7] for e in half["entry"] if e[6])
    assert half["automerge"] == [(table, 16) for table, _ in USUAL]  # still loading
    app = create_app({"DATA_DIR": killed_dir, "TIMEZONE": "UTC", "AUTH_MODE": "dev",
                      "DATABASE_URL": f"sqlite:///{killed_dir}/commonplace.db",
                      "OWNERS": [], "VIEWERS": [], "TESTING": True})
    rerun = transfer.import_folder(app.extensions["db"], source, workers=0)
    assert rerun.unchanged == len(half["entry"]) and rerun.created == 305 - len(half["entry"])
    assert differences(snapshot(killed_dir), snapshot(whole_dir)) == {}


def _front_matter_as_pyyaml_writes_it(entry: Entry) -> str:
    meta: dict = {"title": entry.title, "date": entry.date}
    if entry.kind == "week":
        meta.update(kind="week", week=entry.iso_week)
    meta.update(tags=entry.tag_list, status=entry.status)
    front = yaml.safe_dump(meta, sort_keys=False, allow_unicode=True, default_flow_style=None)
    return f"---\n{front}---\nbody\n"


def test_mirror_files_are_written_as_pyyaml_writes_them():
    """to_text takes libyaml's emitter where it writes PyYAML's bytes; fuzzed titles and
    tags on both sides of that line (long ones, emoji, quotes, YAML's own words)."""
    rng = random.Random(14)
    alphabets = ["abc XYZ-'", "a:#-?,[]{}'\"!&*|>%@`. \t", "yes no null ~ 1e3 0x1 -+.",
                 "éü漢字—«»\u00a0\u2028🙂 a", "".join(map(chr, range(32, 127)))]
    titles = ["yes", "null", "- a", "a: b", " lead", "trail ", "#x", "'q'", '"d"', "2024-01-01",
              "x" * 61, "é" * 41, "🙂", "a\u2028b"]
    for n in range(3000):
        alphabet = alphabets[n % len(alphabets)]
        titles.append("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 90))))
    for n, title in enumerate(titles):
        tags = " ".join("".join(rng.choice("abcé/-_") for _ in range(rng.randint(1, 12)))
                        for _ in range(n % 5))
        entry = Entry(kind="week" if n % 7 == 0 else "entry", date=dt.date(2024, 1, 1) +
                      dt.timedelta(days=n), iso_week="2024-W01", title=title, slug="s",
                      tags=tags, status="published", body_md="body")
        assert mirror.to_text(entry) == _front_matter_as_pyyaml_writes_it(entry), title
