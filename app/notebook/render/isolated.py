"""Rendering under a budget of time and memory (`budgeted`).

Python cannot stop a thread in the middle of a regular expression or a C call, so a body
that may render for long is rendered in a child process, which is killed when its time is
up and which runs under an address-space limit, so that a render that would eat the
machine's memory fails there with MemoryError instead. A worker keeps a few such children,
started when first needed (each imports only the markdown pipeline, never the web app),
and each child exits by itself after a while without work, so a worker at rest holds none.
The time limit counts from when the body reaches a child, so a child's start (an
interpreter and the pipeline's imports, slow on a loaded host) never refuses a note.

A short body renders in-process, with no round trip: every construct known to render in
more than linear time (bench/save_lock.py's cases) stays well inside the budget at SMALL
characters, and the in-process render still turns RecursionError and any other exception
into a refusal. docs/ARCHITECTURE.md ("A save, end to end") has the figures and the
command.
"""

from __future__ import annotations

import os
import pickle
import select
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from .rendered import default_tag_url
from .template import Template, template

TIME_LIMIT_S = 4.0
MEMORY_LIMIT_MB = 1024  # address space of a child, the interpreter and the pipeline included
SMALL = 8_192  # characters: rendered in-process
CHILDREN = 2  # at once per process; more renders wait for one
IDLE_S = 60.0  # a child with no work for this long exits
START_S = 60.0  # starting a child (an interpreter and the pipeline's imports) on a busy host


class RenderRefused(Exception):
    """The body could not be rendered within the budget, or not at all; the message says
    which limit or what went wrong, in words for the person who wrote it."""


def budgeted(body: str, embed_names: tuple[str, ...] = (),
             tag_url: Callable[[str], str] = default_tag_url,
             seconds: float = TIME_LIMIT_S,
             files: dict[str, str | None] | None = None) -> Template:
    """template.template(body, embed_names, tag_url, files) within the budget."""
    if len(body) <= SMALL:
        try:
            return template(body, embed_names, tag_url, files)
        except Exception as exc:  # RecursionError, MemoryError among them: the body's fault
            raise RenderRefused(_problem(exc)) from None
    return _POOL.render((body, embed_names, tag_url, files), seconds)


def _problem(exc: BaseException) -> str:
    if isinstance(exc, RecursionError):
        return "this note nests too deeply to render (quotes or lists inside each other)"
    if isinstance(exc, MemoryError):
        return f"this note needs more than {MEMORY_LIMIT_MB} MB to render"
    return f"this note could not be rendered: {type(exc).__name__}: {exc}"[:300]


class _Pipe:
    """One end of a pipe carrying pickled messages, each after its length. (What
    multiprocessing.connection does, without loading multiprocessing into every web
    worker for it.)"""

    HEAD = struct.Struct("!Q")

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def send(self, message) -> None:
        data = pickle.dumps(message, pickle.HIGHEST_PROTOCOL)
        view = memoryview(self.HEAD.pack(len(data)) + data)
        while view:
            view = view[os.write(self.fd, view):]

    def poll(self, timeout: float) -> bool:
        """Whether a message (or the end of the pipe) has arrived within `timeout` s."""
        return bool(select.select([self.fd], [], [], timeout)[0])

    def recv(self):
        return pickle.loads(self._read(self._read(self.HEAD.size, self.HEAD.unpack)[0]))

    def _read(self, size: int, then=bytes):
        chunks, left = [], size
        while left:
            chunk = os.read(self.fd, min(left, 1 << 20))
            if not chunk:
                raise EOFError
            chunks.append(chunk)
            left -= len(chunk)
        return then(b"".join(chunks))

    def close(self) -> None:
        os.close(self.fd)


class _Child:
    def __init__(self) -> None:
        down_r, down_w = os.pipe()  # parent → child
        up_r, up_w = os.pipe()  # child → parent
        root = str(Path(__file__).resolve().parents[3])
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [root, *filter(None, [os.environ.get("PYTHONPATH")])])}
        self.proc = subprocess.Popen(
            [sys.executable, "-c", f"from app.notebook.render.isolated import child; "
                                   f"child({down_r}, {up_w})"],
            pass_fds=(down_r, up_w), stdin=subprocess.DEVNULL, env=env)
        os.close(down_r)
        os.close(up_w)
        self.send_to, self.hear_from = _Pipe(down_w), _Pipe(up_r)
        self.last_used = time.monotonic()
        if not self.hear_from.poll(START_S) or self.hear_from.recv() != "ready":
            self.close()
            raise RenderRefused("the renderer could not be started; try again")

    def fresh(self) -> bool:
        """Alive and not about to exit for idleness."""
        return (self.proc.poll() is None
                and time.monotonic() - self.last_used < IDLE_S / 2)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.send_to.close()
        self.hear_from.close()


class _Pool:
    def __init__(self) -> None:
        self.idle: list[_Child] = []
        self.lock = threading.Lock()
        self.slots = threading.BoundedSemaphore(CHILDREN)

    def render(self, job: tuple, seconds: float) -> Template:
        if not self.slots.acquire(timeout=seconds):
            raise RenderRefused(f"other long notes are being rendered; try again in "
                                f"{seconds:.0f} s")
        try:
            child = self._take()
            try:
                child.send_to.send(job)
            except OSError:  # it exited just now: one fresh try
                child.close()
                child = _Child()
                child.send_to.send(job)
            if not child.hear_from.poll(seconds):
                child.close()
                self._replace()
                raise RenderRefused(f"this note took longer than {seconds:g} s to render, "
                                    f"the limit; split it, or simplify what repeats in it")
            try:
                verdict, value = child.hear_from.recv()
            except (EOFError, OSError):  # killed (by the memory limit's consequences, or else)
                child.close()
                raise RenderRefused(f"this note could not be rendered within "
                                    f"{MEMORY_LIMIT_MB} MB and {seconds:g} s") from None
            if verdict != "ok":
                child.close()  # (after MemoryError a fresh child is the safe one)
                raise RenderRefused(value)
            child.last_used = time.monotonic()
            with self.lock:
                self.idle.append(child)
            return value
        finally:
            self.slots.release()

    def _replace(self) -> None:
        """Start a child for the next long note in the background: a note stopped at the
        limit is often followed by another (the same note saved again, an attack)."""
        def start() -> None:
            try:
                child = _Child()
            except RenderRefused:
                return
            with self.lock:
                self.idle.append(child)

        threading.Thread(target=start, daemon=True, name="render-child").start()

    def _take(self) -> _Child:
        with self.lock:
            while self.idle:
                child = self.idle.pop()
                if child.fresh():
                    return child
                child.close()
        return _Child()


_POOL = _Pool()


def child(read_fd: int, write_fd: int) -> None:
    """A render child's life: ready, then one render per request, until idle or told to
    stop (its pipe closes)."""
    import resource

    limit = MEMORY_LIMIT_MB * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    hear_from, answer = _Pipe(read_fd), _Pipe(write_fd)
    template("warm *up* [[x]]")  # the pipeline's imports, before the clock runs
    answer.send("ready")
    while hear_from.poll(IDLE_S):
        try:
            body, embed_names, tag_url, files = hear_from.recv()
        except EOFError:
            return
        try:
            answer.send(("ok", template(body, embed_names, tag_url, files)))
        except Exception as exc:
            answer.send(("refused", _problem(exc)))
            if isinstance(exc, MemoryError):
                return
