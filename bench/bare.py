"""The baselines bench/web.py measures the notebook's pages against, served by gunicorn
with the repository's gunicorn.conf.py (same worker class, workers, threads):

    GET /      bare Flask: a constant answer
    GET /row   bare Flask + one SQLite row (a fresh connection's read, as a request's
               session makes) + a small Jinja template

    gunicorn -c gunicorn.conf.py --bind 127.0.0.1:PORT bench.bare:app   (BENCH_DB=<file>)
"""

from __future__ import annotations

import os
import sqlite3
import threading

from flask import Flask, render_template
from jinja2 import DictLoader

app = Flask(__name__)
DB = os.environ.get("BENCH_DB", ":memory:")
PAGE = """<!doctype html><title>{{ title }}</title><h1>{{ title }}</h1>
<p>{{ day }} · {% for t in tags %}#{{ t }} {% endfor %}</p>"""
app.jinja_loader = DictLoader({"page.html": PAGE})  # compiled once, as the app's are
_local = threading.local()


def _connection() -> sqlite3.Connection:
    if not hasattr(_local, "conn"):  # one per thread, kept: as SQLAlchemy's pool keeps them
        _local.conn = sqlite3.connect(DB, check_same_thread=False)
        _local.conn.execute("PRAGMA journal_mode = WAL")
    return _local.conn


@app.get("/")
def bare():
    return "ok"


@app.get("/row")
def row():
    conn = _connection()
    conn.execute("BEGIN")
    found = conn.execute("SELECT title, date, tags FROM entry WHERE id = 1").fetchone()
    conn.execute("COMMIT")
    title, day, tags = found or ("nothing", "", "")
    return render_template("page.html", title=title, day=day, tags=tags.split())
