"""The pathological markdown corpus (tests/pathological_markdown.py): each input, a few
hundred kB, renders in a child process within a generous CPU-time limit, and what comes
out is sanitized. The limit catches quadratic blow-ups (minutes of CPU at this size), not
speed; it is CPU time, so a loaded machine does not make it fail."""

from __future__ import annotations

import multiprocessing
import queue
import resource
import time

import pytest

from app.notebook import render
from tests.app.notebook.test_sanitizer import problems
from tests.pathological_markdown import CORPUS, SIZE, still_slow

CPU_LIMIT_S = 20  # generous: a quadratic path at this size takes minutes
WALL_LIMIT_S = 180  # only if the child can get no CPU at all


def _render(name: str, out) -> None:
    # past the limit the kernel stops the child (SIGXCPU): no answer comes back
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_LIMIT_S, CPU_LIMIT_S))
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
    deadline = time.monotonic() + WALL_LIMIT_S
    try:
        while time.monotonic() < deadline:
            try:
                return out.get(timeout=1)
            except queue.Empty:
                child.join(0)
                if child.exitcode is not None:  # done, or stopped at the CPU limit
                    try:
                        return out.get(timeout=5)
                    except queue.Empty:
                        return None
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
    assert result is not None, f"{name}: not done within {CPU_LIMIT_S} s of CPU"
    status, html, toc = result
    assert status == "ok", f"{name}: {status}"
    assert problems(html) == [] and problems(toc) == []


def test_the_corpus_is_built_to_size():
    for name, build in CORPUS.items():
        if name != "deep-blockquote":
            assert len(build(SIZE)) >= SIZE * 3 // 4, name


# --- what the bounds do to the HTML (tests/app/notebook/test_render_fast.py: nothing, below them)
# ---


def test_a_quote_deeper_than_the_bound_keeps_its_first_levels():
    html = render.render(">" * 500 + " deep").html
    assert html.count("<blockquote>") == 32
    assert "deep" in html


def test_nesting_past_the_stack_renders_the_text_and_the_next_note_renders_whole():
    html = render.render("- " * 500 + "deepest\n\n" + "> - " * 300 + "also").html
    assert "deepest" in html and "also" in html and "<li>" not in html
    # the thread's parser was left half-way by the overflow: the next render is whole
    assert render.render("- a\n- b").html == "<ul>\n<li>a</li>\n<li>b</li>\n</ul>"


def test_emphasis_is_skipped_only_in_a_text_with_more_delimiters_than_a_person_writes():
    assert "<em>a</em>" in render.render("*a* " + "_" * 9_000).html
    assert "<em>" not in render.render("*a* " + "_" * 10_001).html
