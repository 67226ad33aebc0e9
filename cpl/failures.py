"""How `cpl` ends: its exit codes, and the errors that carry them. Every failure a user
can meet is one of these, printed as "cpl: what happened" and a line on what to do."""

from __future__ import annotations

import click

OK = 0
ERROR = 1  # the server refused the request (bad input), or something else went wrong
USAGE = 2  # a bad option or argument (click's own code)
CONFLICT = 3  # an edit overlapped another save: the text is kept as a draft
NOT_FOUND = 4  # no such entry, letter, run or experiment
AUTH = 5  # 401/403: no identity, a refused token, read-only access
OFFLINE = 6  # the server could not be reached (a capture is queued instead: exit 0)
RUN_FAILED = 7  # --exit-status: the run ended other than SUCCEEDED
DETACHED = 130  # Ctrl-C stopped watching; the run goes on

EXIT_CODES = (
    (OK, "success (a capture queued while offline is a success too)"),
    (ERROR, "the server refused the request, or another error"),
    (USAGE, "bad usage: an unknown option, a missing argument"),
    (CONFLICT, "an edit overlapped another save; your text is kept as a draft"),
    (NOT_FOUND, "no such entry, letter, run or experiment"),
    (AUTH, "not allowed: no tailnet identity, a refused token, or read-only access"),
    (OFFLINE, "the server could not be reached"),
    (RUN_FAILED, "with --exit-status: the run ended FAILED, CANCELLED, LOST or EXPIRED"),
    (DETACHED, "Ctrl-C while watching: detached, the run keeps going"),
)


class CplError(click.ClickException):
    """A failure with a message and, where we know one, what to do about it."""

    exit_code = ERROR

    def __init__(self, message: str, hint: str = "", exit_code: int | None = None):
        super().__init__(message)
        self.hint = hint
        if exit_code is not None:
            self.exit_code = exit_code

    def show(self, file=None) -> None:
        click.echo(f"cpl: {self.message}", err=True)
        for line in self.hint.splitlines():
            click.echo(f"  {line}", err=True)


class Unreachable(CplError):
    """No answer from the server: a network error, a timeout, or a proxy's 502/503/504."""

    exit_code = OFFLINE


class ApiError(CplError):
    """The server answered with an error: `status`, its `code`, and the whole `error`
    object (a 409's current text and conflicting hunks ride in it)."""

    def __init__(self, status: int, code: str, message: str, error: dict, hint: str = ""):
        super().__init__(message, hint, exit_code=_exit_for(status, code))
        self.status = status
        self.code = code
        self.error = error


def _exit_for(status: int, code: str) -> int:
    if status in (401, 403):
        return AUTH
    if status in (404, 410):
        return NOT_FOUND
    if status == 409 and code == "conflict":
        return CONFLICT
    return ERROR
