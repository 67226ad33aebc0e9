"""Capturing notes: `cpl note`, the offline queue behind it (`cpl queue`), and the drafts
kept when the server would not take something (`cpl drafts`)."""

from __future__ import annotations

import datetime as dt
import re
import sys

import click
from rich.text import Text

from base.durable import write_private
from cpl import outbox
from cpl.context import Ctx, done, json_option, pass_ctx, print_json
from cpl.editor_loop import EditorFailed, drafts, run_editor
from cpl.failures import ERROR, USAGE, ApiError, CplError, Unreachable
from cpl.profile import drafts_dir
from cpl.shapes import entry_full
from cpl.terminal import Out

TITLE_CHARS = 80


def title_from(text: str) -> tuple[str, str]:
    """(title, body) for a capture given no --title: a first-line heading is the title
    (and leaves the body); otherwise the first line, without its #tags and [[ ]], is."""
    first, _, rest = text.partition("\n")
    heading = re.match(r"^#{1,6}\s+(.+?)\s*#*\s*$", first)
    if heading and rest.strip():
        return _clean(heading[1]), rest.lstrip("\n")
    return _clean(first), text


def _clean(line: str) -> str:
    # A title holds no control characters (the server refuses them): a first line piped
    # from a coloured terminal loses its escape sequences, not the capture.
    line = re.sub(r"[\x00-\x1f\x7f-\x9f]", " ", re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", line))
    line = re.sub(r"\[\[([^\]|]+)\|([^\]]+)\]\]", r"\2", line)
    line = re.sub(r"\[\[([^\]]+)\]\]", r"\1", line)
    line = re.sub(r"(?<!\S)#[A-Za-z][\w/-]*", "", line)
    line = " ".join(re.sub(r"^#{1,6}\s+", "", line).split())
    if len(line) > TITLE_CHARS:
        line = line[:TITLE_CHARS].rsplit(" ", 1)[0].rstrip(",;:") + "…"
    return line or f"Note {dt.datetime.now():%Y-%m-%d %H:%M}"


def day(value: str | None) -> str | None:
    if value in (None, ""):
        return None
    words = {"today": 0, "yesterday": -1, "tomorrow": 1}
    if value in words:
        return (dt.date.today() + dt.timedelta(days=words[value])).isoformat()
    try:
        return dt.date.fromisoformat(value).isoformat()
    except ValueError:
        raise click.BadParameter("give YYYY-MM-DD, today or yesterday", param_hint="--date"
                                 ) from None


def _text(ctx: Ctx, words: tuple[str, ...]) -> str:
    if words:
        return _utf8(" ".join(words).encode("utf-8", "surrogateescape"))
    if not sys.stdin.isatty():
        return _utf8(sys.stdin.buffer.read())
    try:
        return run_editor("", "cpl-note-", ctx.config)
    except EditorFailed as exc:
        raise CplError(f"{exc}; nothing captured") from None


@click.command("note", short_help="Capture a note from arguments, a pipe or a file.")
@click.argument("text", nargs=-1)
@click.option("--title", "-T", help="The title (default: the first line, or its heading).")
@click.option("--date", "-d", "date", help="YYYY-MM-DD, today or yesterday (default: today).")
@click.option("--tag", "-t", "tags", multiple=True, help="A tag (repeat for more); #tags in "
              "the text count too.")
@click.option("--draft", is_flag=True, help="Save as a draft (only owners see it).")
@json_option
@pass_ctx
def note(ctx: Ctx, text, title, date, tags, draft, as_json):
    """Capture a note, from the arguments, a pipe or a file (with none of these, on a
    terminal, your editor opens).

    If the server cannot be reached the note waits in the offline queue (exit 0) and is
    sent by the next `cpl note`, `cpl login` or `cpl queue flush`, with a key that makes
    sure a retry never creates it twice.

    \b
    Examples:
      cpl note "try 1F1B with 8 micro-batches #pipeline [[2024-W13]]"
      echo "reading: the ZeRO paper" | cpl note --tag reading
      cpl note --title "Standup" < standup.md
      cpl note --draft --date yesterday "half an idea"
    """
    body = _text(ctx, text).replace("\r\n", "\n").strip("\n")
    if not body.strip():
        raise CplError("nothing to capture: the text is empty", exit_code=USAGE)
    if title:
        title = title.strip()
    else:
        title, body = title_from(body)
    fields = {"title": title, "body": body, "tags": [t.lstrip("#") for t in tags],
              "status": "draft" if draft else "published"}
    if day(date):
        fields["date"] = day(date)
    capture = outbox.new_capture(ctx.api.server, fields)
    out = ctx.out
    offline = ""
    if any(c.server == ctx.api.server for c in outbox.queued()):
        offline = report_drain(out, outbox.drain(ctx.api))
    if not offline:
        try:
            entry, _ = outbox.send(ctx.api, capture)
        except Unreachable as exc:
            offline = exc.message
        except ApiError as exc:
            if exc.status < 500:
                kept = keep_capture(body if body.startswith(title) else f"# {title}\n\n{body}")
                exc.hint = (exc.hint + "\n" if exc.hint else "") + f"Your text is kept in {kept}."
                raise
            offline = exc.message
    if offline:
        capture.last_error = offline
        capture.save()
        out.note(f"{offline}\nqueued offline ({capture.key[:8]}): it will be sent by the next "
                 "`cpl note` or by `cpl queue flush`", style="yellow")
        if as_json:
            print_json({"queued": queue_item(capture)})
        return
    if as_json:
        print_json(entry_full(entry, ctx.api.server))
    elif out.tty:
        out.print(Text.assemble("saved ", (f"entry {entry['id']}", "id"), " ",
                                (f"“{entry['title']}”", "title")))
        out.line(ctx.api.absolute(entry["url"]))
    else:
        out.line(ctx.api.absolute(entry["url"]))


def _utf8(raw: bytes) -> str:
    """The capture's text, or a refusal that keeps its bytes: text that is not UTF-8 (a
    Latin-1 file) is the server's to refuse, and a pipe cannot be read twice."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        kept = keep_capture(raw)
        raise CplError(f"the text is not UTF-8 (byte 0x{raw[exc.start]:02x} at offset "
                       f"{exc.start}); it is kept as it came in {kept}: convert it (iconv -f "
                       "latin1 -t utf-8) and capture it again", exit_code=USAGE) from None


def keep_capture(text: str | bytes) -> str:
    path = drafts_dir() / f"capture-{dt.datetime.now():%Y%m%dT%H%M%S%f}.md"
    write_private(path, text)
    return str(path)


def report_drain(out: Out, report: outbox.Drained) -> str:
    """Say what a drain did; returns why the rest stayed queued ("" if nothing did)."""
    if report.sent:
        again = sum(1 for _, _, replayed in report.sent if replayed)
        out.note(f"sent {len(report.sent)} queued note(s)"
                 + (f" ({again} had arrived already: not made twice)" if again else ""))
    for capture in report.gone:
        out.note(f"queued note {capture.key[:8]} had been saved and deleted since: dropped")
    for capture, why in report.refused:
        out.note(f"queued note {capture.key[:8]} was refused: {why}\n"
                 f"  it stays queued; fix the cause, or drop it: cpl queue drop {capture.key[:8]}",
                 style="red")
    return report.offline


def queue_item(capture: outbox.Capture) -> dict:
    return {"key": capture.key, "created_at": capture.created_at, "server": capture.server,
            "title": capture.fields.get("title"), "tries": capture.tries,
            "last_error": capture.last_error}


@click.group("queue", invoke_without_command=True,
             short_help="Captures waiting for the server; flush, drop.")
@json_option
@pass_ctx
@click.pass_context
def queue(click_ctx, ctx: Ctx, as_json):
    """The offline queue: captures waiting for the server.

    \b
    Examples:
      cpl queue              what is waiting
      cpl queue flush        send it now
      cpl queue drop 3f2a    give up on one (by the start of its key)
    """
    if click_ctx.invoked_subcommand:
        return
    waiting = outbox.queued()
    if as_json:
        print_json({"queued": [queue_item(c) for c in waiting]})
        return
    if not waiting:
        ctx.out.note("the offline queue is empty")
    for c in waiting:
        if ctx.out.tty:
            ctx.out.print(Text.assemble((c.key[:8], "id"), f"  {c.created_at[:16]}  ",
                                        (c.fields.get("title", ""), "title"),
                                        f"  → {c.server}", (f"  ({c.last_error})" if
                                                             c.last_error else "", "muted")))
        else:
            ctx.out.tsv(c.key, c.created_at, c.server, c.fields.get("title"), c.tries,
                        c.last_error)


@queue.command("flush")
@pass_ctx
def queue_flush(ctx: Ctx):
    """Send every waiting capture to the server now.

    \b
    Example:
      cpl queue flush
    """
    waiting = [c for c in outbox.queued() if c.server == ctx.api.server]
    if not waiting:
        ctx.out.note(f"nothing queued for {ctx.api.server}")
        return
    report = outbox.drain(ctx.api)
    offline = report_drain(ctx.out, report)
    if offline:
        raise Unreachable(f"{offline}; {len(outbox.queued())} note(s) still queued")
    done(ERROR if report.refused else 0)


@queue.command("drop")
@click.argument("key")
@pass_ctx
def queue_drop(ctx: Ctx, key):
    """Remove a waiting capture without sending it (give at least 4 characters of its key).

    \b
    Example:
      cpl queue drop 3f2a91c0
    """
    if len(key) < 4:
        raise click.BadParameter("give at least 4 characters of the key", param_hint="KEY")
    gone = outbox.drop(key)
    if not gone:
        raise CplError(f"no queued capture's key starts with {key}", exit_code=4)
    for capture in gone:
        ctx.out.note(f"dropped {capture.key} “{capture.fields.get('title')}”")


@click.command("drafts", short_help="Texts the server did not take, kept for you.")
@json_option
@pass_ctx
def drafts_command(ctx: Ctx, as_json):
    """Texts kept because the server did not take them: edits that met a conflict or no
    server (send one again with `cpl edit ID --resume`), captures it refused.

    \b
    Example:
      cpl drafts
    """
    kept = drafts()
    captures = sorted(drafts_dir().glob("capture-*.md"))
    if as_json:
        print_json({"drafts": [{"path": str(d.path), "entry_id": d.entry_id,
                                "base_revision": d.base_revision, "saved_at": d.saved_at}
                               for d in kept] +
                    [{"path": str(p), "entry_id": None, "base_revision": None,
                      "saved_at": None} for p in captures]})
        return
    if not kept and not captures:
        ctx.out.note(f"no drafts in {drafts_dir()}")
    for d in kept:
        ctx.out.tsv(d.path, f"entry {d.entry_id}", f"from revision {d.base_revision}",
                    d.saved_at, f"cpl edit {d.entry_id} --resume")
    for path in captures:
        ctx.out.tsv(path, "a refused capture", "", "", f"cpl note < {path}")
