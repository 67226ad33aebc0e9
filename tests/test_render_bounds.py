"""The pathological markdown corpus (tests/pathological_markdown.py): each input, a few
hundred kB, renders in a child process within a generous limit, and what comes out is
sanitized. The limit catches quadratic blow-ups (minutes at this size), not speed: it is
set for a loaded two-core machine."""

from __future__ import annotations

import multiprocessing
import queue

import pytest

from app.notebook import render
from tests.pathological_markdown import CORPUS, SIZE, still_slow
from tests.test_sanitizer import problems

LIMIT_S = 10


def _render(name: str, out: multiprocessing.Queue) -> None:
    try:
        r = render.render(CORPUS[name](SIZE))
        out.put(("ok", r.html, r.toc_html))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which fails
        out.put((f"{type(exc).__name__}: {exc}"[:500], "", ""))


def _rendered_within_limit(name: str) -> tuple[str, str, str] | None:
    """(status, html, toc) from a child process, or None if it ran past the limit."""
    context = multiprocessing.get_context("fork")
    out = context.Queue()
    child = context.Process(target=_render, args=(name, out))
    child.start()
    try:
        return out.get(timeout=LIMIT_S)
    except queue.Empty:
        return None
    finally:
        if child.is_alive():
            child.kill()
        child.join()


@pytest.mark.parametrize("name", [
    pytest.param(name, marks=[pytest.mark.xfail(reason=still_slow[name], strict=True)]
                 if name in still_slow else [])
    for name in CORPUS
])
def test_pathological_markdown_renders_in_time_and_sanitized(name):
    result = _rendered_within_limit(name)
    assert result is not None, f"{name}: no answer within {LIMIT_S} s"
    status, html, toc = result
    assert status == "ok", f"{name}: {status}"
    assert problems(html) == [] and problems(toc) == []


def test_the_corpus_is_built_to_size():
    for name, build in CORPUS.items():
        if not name.startswith("deep-blockquote") or name == "deep-blockquote-lines":
            assert len(build(SIZE)) >= SIZE // 2, name
