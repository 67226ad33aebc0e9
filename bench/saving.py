"""Saves through the API as the notebook grows, for bench/web.py: at the end of each N,
with the pages measured, SAVES notes with four [[links]] (three to titles of the notebook,
one to a note not written yet) alternated with as many without a link, one at a time. A
save resolves each link of its note (entries.resolve). Printed: the p50 of each, their
ratio at each N, and that ratio at the largest N over the smallest (goal: flat)."""

from __future__ import annotations

import json
import sqlite3
import time

from bench.corpus import Corpus
from bench.serving import one_connection, pct

SAVES = 20  # notes saved with links, and as many without


def measure(port: int, corpus: Corpus, rng) -> tuple[float, float]:
    """The sequential save p50s in ms (with links, without); it adds 2 * SAVES notes."""
    with sqlite3.connect(corpus.database) as db:
        titles = [row[0] for row in db.execute(
            "SELECT title FROM entry WHERE kind = 'entry' ORDER BY random() LIMIT 50")]
    conn = one_connection(port)
    times: dict[bool, list[float]] = {True: [], False: []}
    for i in range(2 * SAVES):
        linked = i % 2 == 0
        links = ([f"[[{rng.choice(titles)}]]" for _ in range(3)] + ["[[Not written yet]]"]
                 if linked else [])
        body = json.dumps({"title": f"Bench save {i} {rng.getrandbits(32)}",
                           "body": " ".join(["A saved note.", *links]),
                           "tags": ["bench"]}).encode()
        start = time.perf_counter()
        conn.request("POST", "/api/v1/entries", body=body,
                     headers={"Authorization": f"Bearer {corpus.token}",
                              "Content-Type": "application/json"})
        response = conn.getresponse()
        answer = response.read()
        times[linked].append((time.perf_counter() - start) * 1000)
        if response.status != 201:
            raise RuntimeError(f"a save answered {response.status}: {answer[:200]!r}")
    conn.close()
    return pct(times[True], 50), pct(times[False], 50)


def report(saved: dict[int, tuple[float, float]]) -> None:
    print(f"\nsaves through the API, sequential p50 in ms: a note with four [[links]] (three "
          f"to existing titles, one to none) / one without ({SAVES} each, alternated); "
          "goal: the links cost the same at every N")
    for n, (linked, plain) in saved.items():
        print(f"  N={n:>6}  {linked:.2f} / {plain:.2f} ({linked / plain:.2f}x)")
    small, large = min(saved), max(saved)
    ratio = {n: linked / plain for n, (linked, plain) in saved.items()}
    print(f"  that ratio at N={large} over N={small}: {ratio[large] / ratio[small]:.2f}")
