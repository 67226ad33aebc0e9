"""CPU seconds render() takes on each input of the pathological markdown corpus
(tests/pathological_markdown.py), each in a child process stopped at a limit:

    python bench/pathological.py [--scale 0.25] [--limit 60] [NAME ...]

CPU time (the child's own), not wall time, so a loaded machine reads about the same.
A quadratic path shows as a time that grows four-fold when --scale doubles.
"""

from __future__ import annotations

import argparse
import multiprocessing
import queue
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.pathological_markdown import CORPUS, SIZE  # noqa: E402


def _render(source: str, out) -> None:
    from app.notebook import render

    render.render("warm up")
    start = time.process_time()
    try:
        render.render(source)
        out.put(("ok", time.process_time() - start))
    except BaseException as exc:  # noqa: BLE001 - reported, not raised
        out.put((type(exc).__name__, time.process_time() - start))


def measure(source: str, limit: float) -> tuple[str, float | None]:
    context = multiprocessing.get_context("fork")
    out = context.Queue()
    child = context.Process(target=_render, args=(source, out))
    child.start()
    try:
        return out.get(timeout=limit)
    except queue.Empty:
        return "over limit", None
    finally:
        if child.is_alive():
            child.kill()
        child.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="of the tests' size")
    parser.add_argument("--limit", type=float, default=60.0, help="seconds (wall) per input")
    parser.add_argument("names", nargs="*", help="inputs to run (default: all)")
    args = parser.parse_args()
    size = int(SIZE * args.scale)
    for name in args.names or CORPUS:
        source = CORPUS[name](size)
        status, cpu = measure(source, args.limit)
        shown = f"{cpu:7.2f} s" if cpu is not None else f" >{args.limit:.0f} s"
        print(f"{name:<26} {len(source) / 1000:7.0f} kB {shown}  {status}", flush=True)


if __name__ == "__main__":
    main()
