"""What the tests share that is not a fixture (fixtures are in conftest.py): who is asking,
rows counted and loaded, tokens, the forms the pages post, parsers for the HTML that pages
and the renderer return, and the processes a test starts.

Import it as `from tests.helpers import ...`: the tests run as `python -m pytest` from the
repository root, as the README says.
"""

from __future__ import annotations

import contextlib
import html as html_lib
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

import sqlalchemy as sa
from flask import Flask
from flask.testing import FlaskClient

from app import db as dbmod
from app.journal import runs
from app.models import Token
from app.notebook import isoweeks
from app.web.auth import identity
from jobs.lab.catalogue import registry

ROOT = Path(__file__).resolve().parent.parent
THIS_WEEK = isoweeks.iso_week(isoweeks.today("UTC"))  # the fixtures run in UTC
SMALL = {"steps": 1, "warmup": 0}  # the quickest data_parallel run


# -- who is asking ------------------------------------------------------------------------

OWNER, VIEWER = "owner@example.com", "viewer@example.com"
# A tailnet address talking to the web directly, not through `tailscale serve` on loopback.
TAILNET_PEER = {"REMOTE_ADDR": "100.64.0.7", "REMOTE_PORT": "51234"}


def login_header(login: str | None) -> dict[str, str]:
    """What `tailscale serve` adds to a tailnet user's request (nothing for nobody)."""
    return {"Tailscale-User-Login": login} if login else {}


AS_OWNER, AS_VIEWER = login_header(OWNER), login_header(VIEWER)


@dataclass
class Served:
    """The app in serve mode with OWNER and VIEWER (the `served` fixture)."""

    app: Flask
    db: dbmod.Database
    client: FlaskClient

    def as_user(self, login: str | None) -> Callable:
        """A caller `call(method, path, **kw)` whose requests come from `login` via serve."""

        def call(method: str, path: str, **kw):
            return getattr(self.client, method)(path, headers=login_header(login), **kw)

        return call


def add_token(db: dbmod.Database, name: str, role: str) -> str:
    """A new API token, stored hashed as the CLI stores it; returns the secret."""
    secret = identity.new_token()
    with db.write() as session:
        session.add(Token(name=name, role=role, token_hash=identity.hash_token(secret)))
    return secret


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


def at_revision(tmp_path: Path, revision: str) -> tuple[dbmod.Database, Callable]:
    """A notebook migrated only up to `revision` (as an older Commonplace left it), and
    `migrate(step, revision)` to move it with alembic's command.upgrade or .downgrade, as
    app/upgrades.py runs alembic (on a connection of its own)."""
    from alembic import command

    from app import create_app, upgrades

    data = tmp_path / "data"
    app = create_app({"DATA_DIR": data, "DATABASE_URL": f"sqlite:///{data}/c.db",
                      "TIMEZONE": "UTC", "TESTING": True})
    db = app.extensions["db"]
    cfg = upgrades.alembic_config(db.url)

    def migrate(step, to: str) -> None:
        with db.engine.begin() as conn:
            cfg.attributes["connection"] = conn
            step(cfg, to)

    migrate(command.upgrade, revision)
    return db, migrate


# An entry row as an older notebook holds it, written straight into the table (sqlite3's
# parameters: id, status), for the migration tests.
OLD_ENTRY = ("INSERT INTO entry (id, kind, date, iso_week, title, slug, body_md, body_html, "
             "toc_html, tags, status, revision, created_at, updated_at) VALUES (?, 'entry', "
             "'2024-01-01', '2024-W01', 'Old', 'old', '', '', '', '', ?, 1, "
             "'2024-01-01 00:00:00', '2024-01-01 00:00:00')")


# -- rows ---------------------------------------------------------------------------------


def count(db: dbmod.Database, model, *where) -> int:
    with db.read() as session:
        return session.scalar(sa.select(sa.func.count()).select_from(model).where(*where))


def load(db: dbmod.Database, model, row_id: int):
    with db.read() as session:
        return session.get(model, row_id)


# -- the notebook's forms -----------------------------------------------------------------


def entry_form(**fields) -> dict:
    base = {"date": "2024-03-27", "title": "Pipeline notes", "tags": "gpu pipeline",
            "status": "published", "body": "Bubble fraction is (p-1)/(m+p-1)."}
    base.update(fields)
    return base


def create_entry(client: FlaskClient, **fields) -> int:
    response = client.post("/entries/new", data=entry_form(**fields))
    assert response.status_code == 303, response.text
    return int(re.match(r"/entries/(\d+)/", response.location)[1])


def edit_entry(client: FlaskClient, entry_id: int, base: int | str, **fields):
    return client.post(f"/entries/{entry_id}/edit", data={**entry_form(**fields),
                                                          "base_revision": str(base)})


# -- the journal's forms ------------------------------------------------------------------


def form_for(experiment: str, **changes) -> dict:
    """What a browser sends for the generated form: every field, defaults unless changed."""
    data: dict = {}
    for name, spec in registry.describe(experiment)["params"].items():
        value = changes.pop(name, spec["default"])
        key = "param." + name
        if spec["type"] == "bool":
            if value is True or value == "on":
                data[key] = "on"
        elif spec["type"] == "str_list":
            data[key] = list(value)
        else:
            data[key] = str(value)
    assert not changes, f"not parameters of {experiment}: {changes}"
    return data


def queue(db: dbmod.Database, experiment: str = "data_parallel", **params) -> int:
    with db.write() as session:
        return runs.create(session, experiment, params, actor="test").id


def start_run(client: FlaskClient, experiment: str = "data_parallel", **changes) -> int:
    response = client.post(f"/experiments/{experiment}/run", data=form_for(experiment, **changes))
    assert response.status_code == 303, response.text
    return int(re.fullmatch(r"/runs/(\d+)", response.location)[1])


def schedule_form(experiment: str = "collectives", params_for: str | None = None,
                  **fields) -> dict:
    """The schedule page's form; a field given as None is left out."""
    data = {"name": "Sunday sweep", "experiment": experiment, "cron": "0 2 * * sun",
            "timezone": "Europe/Berlin", "enabled": "on", "misfire_grace_hours": "6",
            "params_for": params_for or experiment,
            **form_for(experiment if experiment in registry.EXPERIMENTS else "collectives")}
    for key, value in fields.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    return data


def make_schedule(client: FlaskClient, **fields) -> int:
    """A schedule saved through the page's form."""
    response = client.post("/schedules", data=schedule_form(**fields))
    assert response.status_code == 303, response.text
    return int(response.location.rsplit("/", 1)[1])


# -- reading HTML -------------------------------------------------------------------------


def error_of(html: str, input_id: str) -> str:
    """The message shown next to a form field ("" if none)."""
    match = re.search(rf'<p class="field-error" id="{re.escape(input_id)}-error"[^>]*>(.*?)</p>',
                      html, re.S)
    return html_lib.unescape(match[1]) if match else ""


class Inputs(HTMLParser):
    """Every form control on a page: inputs by name (a list: checkbox groups repeat a
    name), selects with their options."""

    def __init__(self):
        super().__init__()
        self.inputs: dict[str, list[dict]] = {}
        self.selects: dict[str, list[str]] = {}
        self.forms: list[dict] = []
        self._select: str | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "form":
            self.forms.append(a)
        elif tag == "input" and a.get("name"):
            self.inputs.setdefault(a["name"], []).append(a)
        elif tag == "select":
            self._select = a.get("name")
            self.selects[self._select] = []
        elif tag == "option" and self._select:
            self.selects[self._select].append(a.get("value"))

    def handle_endtag(self, tag):
        if tag == "select":
            self._select = None


def parse(html: str) -> Inputs:
    page = Inputs()
    page.feed(html)
    return page


def post_forms(html: str) -> list[dict]:
    return [f for f in parse(html).forms if f.get("method", "").lower() == "post"]


class Elements(HTMLParser):
    """Every start tag of a fragment, as (tag, attrs, text inside)."""

    def __init__(self, html: str):
        super().__init__(convert_charrefs=True)
        self.found: list[tuple[str, dict[str, str | None], list[str]]] = []
        self.open: list[list[str]] = []
        self.feed(html)
        self.close()

    def handle_starttag(self, tag, attrs):
        text: list[str] = []
        self.found.append((tag, dict(attrs), text))
        if tag not in ("br", "hr", "img", "input", "wbr"):
            self.open.append(text)

    def handle_endtag(self, tag):
        if self.open:
            self.open.pop()

    def handle_data(self, data):
        for text in self.open:
            text.append(data)

    def all(self, tag: str, cls: str | None = None):
        return [
            (attrs, "".join(text))
            for t, attrs, text in self.found
            if t == tag and (cls is None or cls in (attrs.get("class") or "").split())
        ]


def anchors(html: str, cls: str):
    return Elements(html).all("a", cls)


# -- processes ----------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_http(url: str, timeout: float = 30.0, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} before answering")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise TimeoutError(f"{url} did not answer within {timeout}s")


def interruptible() -> None:
    """A child's preexec_fn, for one a test stops with Ctrl-C (SIGINT) as a terminal would:
    a suite run in the background (`cmd &` in a script) ignores SIGINT, and a child would
    inherit that and never see the Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def stop_process(proc: subprocess.Popen) -> None:
    """End a process we started (and only it), politely first."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


@contextlib.contextmanager
def commonplace_up(data_dir: Path) -> Iterator[str]:
    """The real thing: `commonplace up` (migrate + gunicorn + scheduler + runner) on a free
    loopback port, dev auth; yields its base URL and stops it, even on failure."""
    port = free_port()
    env = {**os.environ, "COMMONPLACE_DATA_DIR": str(data_dir),
           "COMMONPLACE_BIND": f"127.0.0.1:{port}", "COMMONPLACE_AUTH": "dev",
           "COMMONPLACE_TIMEZONE": "UTC",
           # the local runner's long poll bounds how long `up` takes to stop: 2 s, not 10
           "COMMONPLACE_RUNNER_POLL_WAIT": "2"}
    env.pop("COMMONPLACE_DATABASE_URL", None)
    log = open(data_dir / "server.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", "up"], cwd=ROOT, env=env,
                            stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for_http(base + "/healthz", proc=proc)
        yield base
    finally:
        stop_process(proc)
        log.close()
