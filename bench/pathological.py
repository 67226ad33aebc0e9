"""CPU seconds render() takes on each input of the pathological markdown corpus
(tests/pathological_markdown.py), each in a child process stopped at a limit, beside
plain Python-Markdown (`markdown.markdown`, no extensions, no sanitizer) on the same
input in the same run, and their ratio:

    python bench/pathological.py [--scale 0.25] [--limit 60] [--baseline-limit 10] [NAME ...]

CPU time (the child's own), not wall time, so a loaded machine reads about the same.
A quadratic path shows as a time that grows four-fold when --scale doubles. The stock
parser is quadratic on some of these inputs (what the render's bounds are for): its
child is stopped at --baseline-limit CPU seconds and shown as ">limit".
"""

from __future__ import annotations

import argparse
import multiprocessing
import queue
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.pathological_markdown import CORPUS, SIZE  # noqa: E402


def _cpu_of(convert, source: str, out) -> None:
    """convert(source)'s CPU seconds (after one warm-up call) to out, or how it failed."""
    convert("warm up")
    start = time.process_time()
    try:
        convert(source)
        out.put(("ok", time.process_time() - start))
    except BaseException as exc:  # noqa: BLE001 - reported, not raised
        out.put((type(exc).__name__, time.process_time() - start))


def _render(source: str, out) -> None:
    from app.notebook import render

    _cpu_of(render.render, source, out)


def _baseline(source: str, out, cpu_limit: int) -> None:
    import markdown

    resource.setrlimit(resource.RLIMIT_CPU, (cpu_limit, cpu_limit))  # then SIGXCPU
    _cpu_of(markdown.markdown, source, out)


def measure(source: str, limit: float, target=_render, *args) -> tuple[str, float | None]:
    context = multiprocessing.get_context("fork")
    out = context.Queue()
    child = context.Process(target=target, args=(source, out, *args))
    child.start()
    deadline = time.monotonic() + limit
    try:
        while time.monotonic() < deadline:
            try:
                return out.get(timeout=1)
            except queue.Empty:
                if not child.is_alive():  # done (its answer may be on its way) or stopped
                    try:
                        return out.get(timeout=5)
                    except queue.Empty:
                        return "over limit", None
        return "over limit", None
    finally:
        if child.is_alive():
            child.kill()
        child.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="of the tests' size")
    parser.add_argument("--limit", type=float, default=60.0, help="seconds (wall) per input")
    parser.add_argument("--baseline-limit", type=int, default=10,
                        help="CPU seconds for plain Python-Markdown per input")
    parser.add_argument("names", nargs="*", help="inputs to run (default: all)")
    args = parser.parse_args()
    size = int(SIZE * args.scale)
    print(f"{'input':<26} {'size':>7}    {'render':>8}  {'markdown':>8}  ratio")
    total = 0.0
    for name in args.names or CORPUS:
        source = CORPUS[name](size)
        status, cpu = measure(source, args.limit)
        base_status, base = measure(source, args.limit, _baseline, args.baseline_limit)
        total += cpu or 0.0
        shown = f"{cpu:6.2f} s" if cpu is not None else f" >{args.limit:.0f} s"
        if base is None:
            base_shown, ratio = f">{args.baseline_limit:5d} s", "-"
        else:
            base_shown = f"{base:6.2f} s"
            ratio = f"{cpu / base:5.1f}" if cpu is not None and base > 0 else "-"
        note = "" if base_status == "ok" else f" (markdown: {base_status})"
        print(f"{name:<26} {len(source) / 1000:4.0f} kB  {shown}  {base_shown}  {ratio:>5}  "
              f"{status}{note}", flush=True)
    print(f"{'render, all inputs':<36} {total:6.2f} s")


if __name__ == "__main__":
    main()
