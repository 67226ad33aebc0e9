"""Output that suits where it goes. On a terminal: tables, rendered markdown, colour; into
a pipe or a file: plain tab-separated lines and raw markdown, with no escape codes.

Colour comes from the terminal's own 16-colour palette (ANSI colours 0-15), never from
256-colour or true-colour codes: the terminal's scheme decides what each looks like, so a
remote web terminal with a light or odd scheme still shows it legibly. No style sets a
background. `--color never`, NO_COLOR and TERM=dumb turn styling off entirely (no escape
codes at all); `--color always` or CLICOLOR_FORCE turn the terminal layout and colour on
in a pipe (`cpl week --color always | less -R`).
"""

from __future__ import annotations

import datetime as dt
import os
import re
import sys
from html import unescape

import click
from rich.console import Console
from rich.text import Text
from rich.theme import Theme

from base import statuses

PALETTES = {"16": "standard", "256": "256", "truecolor": "truecolor"}
STATUS_STYLES = {statuses.SUCCEEDED: "green", statuses.FAILED: "red", statuses.LOST: "red",
                 statuses.EXPIRED: "red", statuses.CANCELLED: "magenta",
                 statuses.RUNNING: "yellow", statuses.LEASED: "yellow",
                 statuses.QUEUED: "cyan", statuses.SKIPPED: "magenta"}
# Rich's defaults, where they name a background or a colour outside the 16, made plain.
THEME = Theme({
    "markdown.code": "bold cyan", "markdown.code_block": "cyan",
    "markdown.link": "blue", "markdown.link_url": "underline blue",
    "bar.back": "bright_black", "bar.complete": "magenta", "bar.finished": "green",
    "bar.pulse": "magenta", "progress.remaining": "cyan", "progress.data.speed": "yellow",
    "id": "cyan", "tag": "magenta", "date": "green", "title": "bold", "muted": "italic",
    "hit": "bold underline", "added": "green", "removed": "red", "hunk": "cyan",
})
RUN_BLOCK = re.compile(r"^```run[ \t]*\n(?:.*\n)*?[ \t]*id[ \t]*:[ \t]*(\d+)[ \t]*\n(?:.*\n)*?```",
                       re.M)


def colour_system(choice: str, palette: str, is_tty: bool) -> str | None:
    """Rich's colour system for --color `choice`: None means no escape codes at all."""
    if choice == "never":
        return None
    if choice == "always":
        return palette
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return None
    if os.environ.get("CLICOLOR_FORCE", "0") != "0":
        return palette
    return palette if is_tty else None


# A line's end: blanks, and the escape codes that style them
_TAIL_RE = re.compile(r"(?:[ \t]|\x1b\[[0-9;]*m)+$", re.M)


def _no_blanks(tail: re.Match) -> str:
    return tail[0].replace(" ", "").replace("\t", "")


class Out:
    """stdout and stderr for one command: `tty` says whether to lay things out for a person."""

    def __init__(self, color: str = "auto", palette: str = "16"):
        forced = color == "always" or (color == "auto" and not os.environ.get("NO_COLOR")
                                       and os.environ.get("CLICOLOR_FORCE", "0") != "0")
        self.tty = sys.stdout.isatty() or forced
        system = colour_system(color, PALETTES.get(palette, "standard"), self.tty)
        self.colour = system is not None
        self.console = Console(theme=THEME, color_system=system, force_terminal=self.tty,
                               highlight=False, emoji=False)
        err_tty = sys.stderr.isatty() or forced
        self.err = Console(theme=THEME, stderr=True, highlight=False, emoji=False,
                           color_system=colour_system(color, PALETTES.get(palette, "standard"),
                                                      err_tty), force_terminal=err_tty)

    def print(self, *things, **kw) -> None:
        """Rich output: styled on a terminal, plain text (no escape codes) elsewhere; no
        line ends in blanks (rich pads a table's last column to its width)."""
        with self.console.capture() as captured:
            self.console.print(*things, **kw)
        self.console.file.write(_TAIL_RE.sub(_no_blanks, captured.get()))

    def line(self, text: str) -> None:
        """A plain line on stdout, whatever stdout is."""
        click.echo(text)

    def tsv(self, *fields) -> None:
        click.echo("\t".join("" if f is None else str(f).replace("\t", " ").replace("\n", " ")
                             for f in fields))

    def note(self, text: str, style: str = "") -> None:
        """A message for the person (stderr), never mixed into what a pipe reads."""
        self.err.print(Text(text, style=style), soft_wrap=True)  # paths stay whole

    def markdown(self, text: str) -> None:
        if self.tty:
            # imported here: rich's Markdown brings markdown-it and pygments, which every
            # cpl command would otherwise load at start for output only a terminal gets
            from rich.markdown import Markdown

            self.print(Markdown(for_terminal(text), code_theme="ansi_dark", hyperlinks=False,
                                inline_code_theme="ansi_dark"))
        else:
            click.echo(text)


def for_terminal(text: str) -> str:
    """Markdown as a terminal shows it best: an embedded run becomes a line saying how to
    see its card here."""
    return RUN_BLOCK.sub(lambda m: f"> ▸ run {m[1]}: `cpl runs show {m[1]}`", text)


def status_text(status: str) -> Text:
    return Text(status, style=STATUS_STYLES.get(status, ""))


def snippet(html_text: str, rich: bool) -> Text | str:
    """A search snippet (escaped HTML with <mark>) as terminal text, on one line: the line
    breaks of the text it was cut from would start lines outside the result's indent."""
    parts = re.split(r"</?mark>", re.sub(r"\s+", " ", html_text or "").strip())
    if not rich:
        return unescape("".join(parts))
    out = Text()
    for i, part in enumerate(parts):
        out.append(unescape(part), style="hit" if i % 2 else "")
    return out


def local_time(stamp: str | None, fmt: str = "%Y-%m-%d %H:%M") -> str:
    """An API time (UTC, ISO with Z) on this machine's clock."""
    if not stamp:
        return ""
    try:
        moment = dt.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return stamp
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return moment.astimezone().strftime(fmt)


def duration(start: str | None, end: str | None) -> str:
    if not start:
        return ""
    try:
        began = dt.datetime.fromisoformat(start.replace("Z", "+00:00"))
        ended = (dt.datetime.fromisoformat(end.replace("Z", "+00:00")) if end
                 else dt.datetime.now(dt.UTC))
    except ValueError:
        return ""
    if began.tzinfo is None:
        began = began.replace(tzinfo=dt.UTC)
    if ended.tzinfo is None:
        ended = ended.replace(tzinfo=dt.UTC)
    return human_seconds((ended - began).total_seconds())


def human_seconds(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def tags_text(tags: list[str]) -> Text:
    return Text(" ".join(f"#{t}" for t in tags), style="tag")
