"""Following a run from the terminal, as `gh run watch` follows a workflow: poll
GET /api/v1/runs/<id> until the run ends.

On a terminal: a progress bar (step / total, rate, ETA) and the latest values the run
reported, redrawn twice a second. Into a pipe: one plain line when the status changes and
at every tenth of the steps. Ctrl-C detaches (exit 130) and says how to reattach; it never
cancels a run (that is `cpl runs cancel`). A server that stops answering is retried for
a while before giving up (exit 6).
"""

from __future__ import annotations

import time

import click
from rich.markup import escape
from rich.progress import (
    BarColumn,
    Progress,
    ProgressColumn,
    TaskProgressColumn,
    TextColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from base.contract import PHASES
from base.statuses import QUEUED, SUCCEEDED, TERMINAL
from cpl.api_client import Api
from cpl.failures import DETACHED, OK, RUN_FAILED, Unreachable
from cpl.terminal import STATUS_STYLES, Out, duration, human_seconds

OUTAGE_S = 120  # how long a watch waits for a server that stopped answering


def latest_values(run: dict) -> str:
    """What the run said last: its phase in words, then its values ("warm-up strategy=ddp")."""
    progress = run.get("progress") or {}
    phase = PHASES.get(str(progress.get("phase", "")), "")
    values = [f"{k}={_short(v)}" for k, v in progress.items()
              if k not in ("step", "total", "phase")]
    return " ".join([phase, *values] if phase else values)


def _short(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


class RateColumn(ProgressColumn):
    def render(self, task) -> Text:
        speed = task.finished_speed or task.speed
        return Text("– steps/s" if not speed else f"{speed:.2g} steps/s", style="yellow")


class StepsColumn(ProgressColumn):
    """step k/n, or before the steps are counted what the run is doing ("loading torch")."""

    def render(self, task) -> Text:
        if task.total is None:
            return Text(task.fields.get("words") or "starting")
        return Text(f"step {int(task.completed)}/{int(task.total)}")


class RunProgress(Progress):
    """The bar, and under it what the run last said (or why it waits)."""

    below = ""

    def get_renderables(self):
        yield self.make_tasks_table(self.tasks)
        if self.below:
            yield Text(self.below, style="muted", overflow="ellipsis", no_wrap=True)


class BarView:
    def __init__(self, out: Out, run_id: int):
        self.progress = RunProgress(
            TextColumn("{task.description}"), BarColumn(), StepsColumn(), TaskProgressColumn(),
            RateColumn(), TimeRemainingColumn(), console=out.console, refresh_per_second=2)
        self.task = self.progress.add_task(f"run {run_id}", total=None)
        self.run_id = run_id
        self.progress.start()

    def update(self, run: dict, trouble: str = "") -> None:
        progress = run.get("progress") or {}
        total = progress.get("total") or None
        status = run.get("status", "")
        style = STATUS_STYLES.get(status) or "default"
        words = "queued" if status == QUEUED else PHASES.get(str(progress.get("phase", "")), "")
        self.progress.update(self.task, total=total, completed=progress.get("step") or 0,
                             words=words,
                             description=f"run {self.run_id} [{style}]{escape(status)}[/]")
        if trouble:
            self.progress.below = trouble
        elif status == QUEUED:
            self.progress.below = "waiting for a runner" + (f": {run['waiting']}"
                                                            if run.get("waiting") else "")
        else:
            self.progress.below = latest_values(run)
        self.progress.refresh()

    def stop(self) -> None:
        self.progress.stop()


class LineView:
    def __init__(self, out: Out, run_id: int, err: bool = False):
        self.out, self.run_id, self.err = out, run_id, err
        self.last: tuple = ()
        self.first: tuple[float, int] | None = None

    def update(self, run: dict, trouble: str = "") -> None:
        progress = run.get("progress") or {}
        step, total = progress.get("step") or 0, progress.get("total") or 0
        status = run.get("status", "")
        tenth = int(10 * step / total) if total else (1 if step else 0)
        if trouble:
            if ("trouble", trouble) != self.last:  # once per outage, not once per look
                self.say(f"run {self.run_id} {status}: {trouble}")
            self.last = ("trouble", trouble)
            return
        phase = progress.get("phase") if not total else None  # a new phase before the steps
        if (status, tenth, phase) == self.last or status in TERMINAL:
            return  # the end is said once, by watch()
        self.last = (status, tenth, phase)
        now = time.monotonic()
        if self.first is None or step < self.first[1]:
            self.first = (now, step)
        parts = [f"run {self.run_id} {status}"]
        if total:
            parts.append(f"step {step}/{total} ({100 * step // total}%)")
            began, at = self.first
            if step > at and now > began:
                rate = (step - at) / (now - began)
                parts.append(f"{rate:.2g} steps/s eta {human_seconds((total - step) / rate)}")
        if status == QUEUED and run.get("waiting"):
            parts.append(f"waiting: {run['waiting']}")
        elif status not in TERMINAL and latest_values(run):
            parts.append(latest_values(run))
        self.say(" ".join(parts))

    def say(self, line: str) -> None:
        click.echo(line, err=self.err)

    def stop(self) -> None:
        pass


def watch(api: Api, out: Out, run_id: int, *, interval: float, exit_status: bool,
          then=None) -> int:
    """Follow the run to its end; `then(run)` (if given) prints the ended run instead of
    the closing line, and the progress lines go to stderr (stdout is for `then`)."""
    view = BarView(out, run_id) if out.tty and then is None else LineView(out, run_id,
                                                                        err=then is not None)
    try:
        run = follow(api, run_id, interval, view)
    except KeyboardInterrupt:
        view.stop()
        out.note(f"detached from run {run_id}; it keeps running.\n"
                 f"  reattach: cpl runs watch {run_id}    stop it: cpl runs cancel {run_id}")
        return DETACHED
    finally:
        view.stop()
    if then is not None:
        then(run)
        return OK if not exit_status or run.get("status") == SUCCEEDED else RUN_FAILED
    status = run.get("status")
    took = duration(run.get("started_at") or run.get("created_at"), run.get("finished_at"))
    line = f"run {run_id} {status}" + (f" in {took}" if took else "")
    if status != SUCCEEDED and run.get("reason"):
        line += f": {run['reason']}"
    if out.tty:
        out.print(Text(line, style=STATUS_STYLES.get(status, "")))
        out.print(Text(f"the card: cpl runs show {run_id}", style="muted"))
    else:
        out.line(line)
    if exit_status:
        return OK if status == SUCCEEDED else RUN_FAILED
    return OK


def follow(api: Api, run_id: int, interval: float, view) -> dict:
    last_answer, run = time.monotonic(), {"status": "?"}
    while True:
        try:
            run = api.get(f"/api/v1/runs/{run_id}")
            last_answer = time.monotonic()
            view.update(run)
        except Unreachable as exc:
            if time.monotonic() - last_answer > OUTAGE_S:
                raise
            view.update(run, trouble=f"{exc.message}; trying again")
        if run.get("status") in TERMINAL:
            return run
        time.sleep(interval)


def follow_logs(api: Api, out: Out, run_id: int, *, follow_on: bool, interval: float) -> int:
    """Print a run's log from the start; with follow_on, keep printing until it ends.
    Resumes by byte offset, so nothing is printed twice or skipped."""
    offset = 0
    try:
        while True:
            chunk = api.get(f"/api/v1/runs/{run_id}/logs", offset=offset)
            data = chunk.get("data") or ""
            if data:
                click.echo(data, nl=False)
            offset = chunk.get("offset", offset)
            if data and offset < chunk.get("size", 0):
                continue  # more is already there
            if not follow_on or chunk.get("done"):
                return OK
            time.sleep(interval)
    except KeyboardInterrupt:
        out.note(f"stopped following run {run_id}'s log (the run goes on)")
        return DETACHED
