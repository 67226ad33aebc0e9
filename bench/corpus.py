"""The notebook bench/web.py serves: bench/importing.py's corpus (N markdown files in the
mirror's format: a Zipf vocabulary, tags, wiki links, code blocks, a letter a week) loaded
by the product's own `commonplace import` (the command bench/importing.py times), with the
parse-only baseline measured alongside; then what the page kinds need from the database
the import wrote: entries to open, the most common tag, a week with entries, search
queries that hit the imported vocabulary, and an owner token made by `commonplace token
create`.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import sqlite3
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.importing import WORDS, baseline, cli_env, commonplace, generate, timed_import
from bench.importing import vocabulary as _vocabulary

DATABASE = "commonplace.db"  # where `commonplace import` puts it: the product's default
SAMPLE = 2000  # entries the entry and api kinds pick from


@dataclass
class Corpus:
    data_dir: Path
    n: int
    write_s: float  # writing the markdown files (not measured against anything)
    baseline_s: float  # read and parse every file, one process: the least an import can do
    import_s: float  # `commonplace import DIR`, end to end (migrate, import, summary)
    cpu_s: float  # the import's CPU seconds, its worker processes included
    summary: str  # what the import printed
    entries: list[tuple[int, str]] = field(default_factory=list)  # (id, slug), a sample
    tag: str = ""  # the most common tag: the tag page's worst case
    tagged: int = 0  # how many entries carry it
    week: str = ""  # a week in the middle of the notebook, for the week: filter
    token: str = ""  # an owner token, for the api kind
    queries: list[str] = field(default_factory=list)

    @property
    def database(self) -> Path:
        return self.data_dir / DATABASE

    @property
    def rate(self) -> float:
        return self.n / self.import_s

    @property
    def own_s(self) -> float:
        """The import's own seconds as its summary says ("… in 81.2 s"): without the
        process start and the migration."""
        found = re.search(r" in ([0-9.]+) s", self.summary)
        return float(found.group(1)) if found else float("nan")


def build(work: Path, n: int, seed: int) -> Corpus:
    """Write n notes under work/notes-in, import them into work/data, and read back what
    the page kinds need. The markdown folder is removed once imported."""
    folder, data = work / "notes-in", work / "data"
    started = time.perf_counter()
    generate(folder, n, seed)
    written = time.perf_counter() - started
    base = baseline(folder)
    seconds, cpu, summary = timed_import(folder, data)
    if f"created {n}," not in summary:  # a check of what was imported, not of a timing
        raise SystemExit(f"the import of {n} files did not create {n} entries: {summary}")
    shutil.rmtree(folder, ignore_errors=True)
    corpus = Corpus(data, n, written, base, seconds, cpu, summary)
    corpus.token = cli_token(data)
    pick(corpus, random.Random(seed))
    corpus.queries = search_queries(seed, corpus.tag, corpus.week)
    return corpus


def reuse_or_build(work: Path, n: int, seed: int) -> Corpus:
    """build(), or the notebook an earlier build(work, n, seed) left in work/data (a 100k
    import takes minutes): read back as build reads it, with a token of its own, and its
    import's figures not measured (nan)."""
    data = work / "data"
    if not (data / DATABASE).exists():
        return build(work, n, seed)
    nan = float("nan")
    corpus = Corpus(data, n, nan, nan, nan, nan, f"reused {data}")
    corpus.token = cli_token(data, name=f"bench-owner-{os.getpid()}")
    pick(corpus, random.Random(seed))
    corpus.queries = search_queries(seed, corpus.tag, corpus.week)
    return corpus


def cli_token(data: Path, role: str = "owner", name: str = "") -> str:
    """A token made the product's way (`commonplace token create`, shown once)."""
    done = subprocess.run(commonplace("token", "create", name or f"bench-{role}", "--role", role),
                          env=cli_env(data), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"token create failed:\n{done.stdout}\n{done.stderr[-2000:]}")
    return done.stdout.strip().splitlines()[-1]


def pick(corpus: Corpus, rng: random.Random) -> None:
    """Entries (kind entry: a letter's /entries/ URL redirects), the most common tag and a
    middle week, read from the imported database."""
    conn = sqlite3.connect(f"file:{corpus.database}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT id, slug FROM entry WHERE kind = 'entry' "
                            "ORDER BY id").fetchall()
        corpus.entries = rng.sample(rows, min(SAMPLE, len(rows)))
        corpus.tag, corpus.tagged = conn.execute(
            "SELECT tag, count(*) FROM entry_tag GROUP BY tag "
            "ORDER BY count(*) DESC, tag LIMIT 1").fetchone()
        total = conn.execute("SELECT count(*) FROM entry").fetchone()[0]
        corpus.week = conn.execute("SELECT iso_week FROM entry ORDER BY date, id "
                                   "LIMIT 1 OFFSET ?", (total // 2,)).fetchone()[0]
    finally:
        conn.close()


def search_queries(seed: int, tag: str, week: str) -> list[str]:
    """Queries over the words generate() wrote (its vocabulary, rebuilt from the same seed):
    common, middling and rare words, two words, prefixes, a phrase, OR, an exclusion, and
    the tag:, week: and kind: filters, alone and with words."""
    words, _ = _vocabulary(random.Random(seed))  # generate()'s first draw: the same list
    assert words[: len(WORDS)] == WORDS
    common, second, middling, rare = words[0], words[1], words[300], words[3000]
    return [
        common,  # in most entries: the ranked window's worst case
        middling,
        rare,
        "pipeline bubble",
        f"{words[17][:5]}*",  # a prefix of a common word
        f"{middling[:3]}*",  # a prefix of the made-up tail: many words
        f'"{common} {second}"',  # a phrase
        "garden OR coffee",
        "tensor -nvlink",
        f"tag:{tag} {common}",
        f"week:{week}",
        "kind:week",
        f"kind:week {second}",
    ]
