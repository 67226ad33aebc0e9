"""One hostile request at a time: pathological markdown while the owner keeps writing,
searches that would burn the CPU, a draft's text through its revisions, a large events
file behind trace.json and the run page."""

from __future__ import annotations

import json
import threading
import time
from urllib.parse import quote

from bench.attacks.target import LIMIT, OWNER, VIEWER, Target, line


def markdown(target: Target, scale: float) -> float:
    """Pathological bodies, each POSTed while the owner keeps writing small notes: the
    slowest of those small writes is how long the write lock was held."""
    n = lambda full: max(10, int(full * scale))  # noqa: E731
    bodies = {
        "headings": "".join(f"# h{i}\n" for i in range(n(40_000))),
        "admonitions": "!!! note\n" * n(50_000),
        "code spans": "`a " * n(400_000),
        "wiki links": " ".join(f"[[t{i}]]" for i in range(n(25_000))),
        "emphasis": "*_" * n(300_000),
        "nested quotes": ">" * 500 + " x",
    }
    worst_write = 0.0
    for name, body in bodies.items():
        stop_at = [False]
        writes: list[float] = []

        def small_writes(stop_at=stop_at, writes=writes, name=name):
            i = 0
            while not stop_at[0]:
                i += 1
                status, _, seconds = target.call("POST", "/api/v1/entries", token="owner",
                                                 body={"title": f"w{name}{i}", "body": "x"})
                writes.append(seconds if status == 201 else LIMIT)
                time.sleep(0.2)
        writer = threading.Thread(target=small_writes, daemon=True)
        writer.start()
        status, _, seconds = target.call("POST", "/api/v1/entries", token="owner",
                                         body={"title": f"md {name}", "body": body})
        stop_at[0] = True
        writer.join(timeout=LIMIT + 5)
        worst_write = max([worst_write, *writes])
        line(f"markdown: {name} ({len(body) // 1000} kB)",
             f"{status or 'no answer'}; slowest other write {max(writes, default=0):.2f} s",
             seconds)
    status, _, seconds = target.call("POST", "/preview", who=OWNER, form=True,
                                     body=b"body=" + quote(">" * 500 + " x").encode())
    line("markdown: 500 nested quotes via /preview", str(status or "no answer"), seconds)
    return worst_write


def searches(target: Target, scale: float) -> float:
    worst = 0.0
    for what, q in (("83 copies of a* OR'd", " OR ".join(["a*"] * 83)),
                    ("35 different prefixes OR'd", " OR ".join(f"{c}{d}*" for c in "abcdefg"
                                                               for d in "aeiou")),
                    ("4 one-letter prefixes", "a* b* c* d*"),
                    ("title:x", "title:pipeline")):
        status, _, seconds = target.call("GET", "/api/v1/search?q=" + quote(q), who=VIEWER)
        worst = max(worst, seconds)
        line(f"search: {what}", str(status or "no answer"), seconds)
    n = max(2, int(16 * scale))
    results: list = []

    def one():
        results.append(target.call("GET", "/api/v1/search?q=" + quote("p* OR b* OR t* OR s*"),
                                   who=VIEWER))
    threads = [threading.Thread(target=one, daemon=True) for _ in range(n)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    home = target.call("GET", "/", who=OWNER)
    for thread in threads:
        thread.join(timeout=LIMIT + 5)
    statuses = sorted({s for s, _, _ in results})
    slowest = max((t for _, _, t in results), default=0.0)
    worst = max(worst, slowest)
    line(f"search: {n} at once from one viewer", f"{statuses}, slowest {slowest:.2f} s, "
         f"owner / {home[2]:.2f} s", time.perf_counter() - start)
    return worst


def drafts(target: Target) -> None:
    start = time.perf_counter()
    _, made, _ = target.call("POST", "/api/v1/entries", token="owner",
                             body={"title": "Plan", "body": "secret draft words",
                                   "status": "draft"})
    made = json.loads(made)
    target.call("PUT", f"/api/v1/entries/{made['id']}", token="owner",
                body={"body": "public words", "status": "published",
                      "base_revision": made["revision"]})
    got = [target.call("GET", path, who=VIEWER)
           for path in (f"/api/v1/entries/{made['id']}/revisions/1",
                        f"/entries/{made['id']}/diff?a=1&b=2",
                        f"/entries/{made['id']}/history",
                        f"/api/v1/entries/{made['id']}/revisions")]
    leaked = sum(b"secret draft" in body for _, body, _ in got)
    line("drafts: viewer reads a draft revision, its diff, history",
         f"{[s for s, _, _ in got]}, draft text leaked {leaked}x", time.perf_counter() - start)


def events(target: Target, scale: float) -> None:
    """A run whose events file is large: trace.json and the run page, twice each."""
    target.call("POST", "/api/v1/runner/register", token="runner", body={"labels": {}})
    status, body, _ = target.call("POST", "/api/v1/runs", token="owner",
                                  body={"experiment": "pipeline", "params": {}})
    if status != 201:
        line("events: a big events file", f"could not queue a run ({status})", 0)
        return
    _, leased, _ = target.call("POST", "/api/v1/runner/lease", token="runner", body={"wait": 5})
    spec = json.loads(leased or b"{}").get("run") or {}
    size = int(7 * 1024 * 1024 * scale)
    rows, i = [], 0
    while sum(map(len, rows)) < size:
        rank, step = i % 4, i // 400
        rows.append(json.dumps({"rank": rank, "strategy": "gpipe", "step": step,
                                "kind": "forward", "t0": i * 1e-3, "t1": i * 1e-3 + 5e-4,
                                "mb": i % 8, "stage": rank}) + "\n")
        i += 1
    data = "".join(rows).encode()
    status, _, seconds = target.call(
        "PUT", f"/api/v1/runner/runs/{spec.get('id')}/artifacts/events.jsonl?epoch="
        f"{spec.get('epoch')}", token="runner", body=data, timeout=60)
    line(f"events: upload {len(data) // 1024} KiB of events", str(status), seconds)
    for path in (f"/api/v1/runs/{spec.get('id')}/trace.json", f"/runs/{spec.get('id')}"):
        first = target.call("GET", path, who=OWNER)
        second = target.call("GET", path, who=OWNER)
        what = "trace.json" if path.endswith(".json") else "the run page"
        line(f"events: {what} twice", f"{first[0]} then {second[0]}", first[2] + second[2])
        line("  the second view alone", "", second[2])
