"""What a lab run promises whoever started it: its exit codes and the reasons they
mean, the files it leaves in its output directory, and the progress lines it prints.

The launcher (jobs/lab/launcher/launch.py) is the one place a failure is classified; it writes
the reason into result.json and exits with the reason's code:

    0  succeeded
    2  invalid_params      refused before anything was launched; `param` names it
    3  correctness         a strategy did not match the single-device reference
    4  rank_failed         a rank crashed (the message: the root-cause rank's exception)
    4  out_of_memory       ... because it ran out of memory
    4  collective_timeout  ... because a collective timed out (a peer hung or died)
    5  timeout             the launcher's watchdog killed the run
    6  unsupported         the machine cannot run it (e.g. more ranks than GPUs on nccl)
    7  cancelled           SIGTERM/SIGINT from the caller

Exit code 4 is "a rank failed"; result.json's reason.code says how. The runner agent
and the web app read this module, so it stays stdlib only: no torch.
"""

from __future__ import annotations

import json
import os
import re

RESULT_SCHEMA_VERSION = 1

# (reason code, exit code): the launcher's one table. The first reason listed for an
# exit code is what that code means when there is no result.json to say more.
REASONS: tuple[tuple[str, int], ...] = (
    ("invalid_params", 2),
    ("correctness", 3),
    ("rank_failed", 4),
    ("out_of_memory", 4),
    ("collective_timeout", 4),
    ("timeout", 5),
    ("unsupported", 6),
    ("cancelled", 7),
)
LAB_REASONS: tuple[str, ...] = tuple(code for code, _ in REASONS)
EXIT_CODES: dict[str, int] = {"succeeded": 0, **dict(REASONS)}
_REASON_FOR_EXIT: dict[int, str] = {exit_code: code for code, exit_code in reversed(REASONS)}


# What the runner agent itself may report beyond the lab's verdict: the lab ended in a
# way it did not classify (a plain exit code), was killed by a signal, or never started.
RUNNER_REASONS: tuple[str, ...] = ("exit_code", "signal", "launch_failed")


def reason_for_exit(exit_code: int) -> str | None:
    """What a launcher's exit code means on its own (None: not one of the lab's)."""
    return _REASON_FOR_EXIT.get(exit_code)


# -- the output directory -------------------------------------------------------------

RESULT_FILE = "result.json"  # the result (rank 0, or the launcher when the ranks could not)
EVENTS_FILE = "events.jsonl"  # every rank's timeline, merged by the launcher
OUTPUT_LOG = "output.log"  # everything torchrun and the ranks printed
PIDS_FILE = "pids.json"  # who to kill if the launcher itself is stuck
DONE_PREFIX = "done.rank"  # done.rank<r>: rank r finished its work (teardown may still fail)


def rank_events_file(rank: int) -> str:
    return f"events.rank{rank}.jsonl"


def done_file(rank: int) -> str:
    return f"{DONE_PREFIX}{rank}"


def pids_record(launcher_pid: int, torchrun_pgid: int) -> dict[str, int]:
    return {"launcher": launcher_pid, "torchrun_pgid": torchrun_pgid}


def torchrun_pgid(out_dir: str | os.PathLike) -> int | None:
    """torchrun's process group as the launcher recorded it (None: nothing launched)."""
    try:
        with open(os.path.join(out_dir, PIDS_FILE)) as fh:
            return int(json.load(fh)["torchrun_pgid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


# -- progress lines on stdout ---------------------------------------------------------

# (a run that spans hosts tags every line with its node, and a rank's with its rank too:
# "[node0 rank0]:progress …", "[node0]:progress …")
PROGRESS_RE = re.compile(r"^(?:\[node\d+(?: rank\d+)?\]:)?progress step=(\d+) total=(\d+)(.*)$")

# What a run is doing before and between its steps, in the order a run goes through them:
# the `phase` field of a progress line, and the words a page or a terminal shows for it.
# The launcher says the first two (it and torchrun's agent start before any rank), rank 0
# the rest, so a run is never silent while it loads, joins and calibrates.
PHASES: dict[str, str] = {
    "launching": "launching the ranks",
    "loading": "loading torch",
    "starting": "starting the ranks",
    "preparing": "preparing the model and its reference",
    "gate": "checking against the reference",
    "calibrating": "calibrating",
    "warmup": "warm-up",
    "timed": "timed steps",
    "memory": "measuring memory",
}
_FIELD_RE = re.compile(r"(\w+)=(\S+)")


def progress_line(step: int, total: int, fields: dict[str, str]) -> str:
    """progress step=<i> total=<n> key=value ... (values already formatted, no spaces)."""
    extra = " ".join(f"{k}={v}" for k, v in fields.items())
    return f"progress step={step} total={total} {extra}".rstrip()


def parse_progress(line: str) -> tuple[int, int, dict[str, int | float | str]] | None:
    """(step, total, fields) from a progress line, numbers as numbers; None otherwise."""
    match = PROGRESS_RE.match(line.strip())
    if not match:
        return None
    fields = {k: _number(v) for k, v in _FIELD_RE.findall(match[3])}
    return int(match[1]), int(match[2]), fields


def progress_words(step: int, total: int, fields: dict) -> str:
    """What a run's latest progress says in words: "step 3 of 40 · warm-up", "loading torch"
    ("" when it has said nothing yet)."""
    phase = PHASES.get(str(fields.get("phase", "")), "")
    if total:
        where = f"step {step} of {total}"
    else:
        where = f"step {step}" if step else ""
    return " · ".join(part for part in (where, phase) if part)


def _number(value: str) -> int | float | str:
    try:
        return float(value) if any(c in value for c in ".eE") else int(value)
    except ValueError:
        return value[:100]
