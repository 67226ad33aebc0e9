"""Reading and editing: `cpl week` (this week's letter), `cpl show`, `cpl edit` and
`cpl search`."""

from __future__ import annotations

import datetime as dt
import re

import click
from rich.padding import Padding
from rich.text import Text

from cpl.context import Ctx, done, json_option, pass_ctx, print_json
from cpl.editor_loop import CHOICES, Editing
from cpl.failures import ApiError
from cpl.shapes import entry_full, entry_summary, search_hit
from cpl.terminal import snippet, tags_text

WEEK_RE = re.compile(r"^\d{4}-W\d{2}$")

resume_option = click.option("--resume", is_flag=True, help="Start from the draft kept when "
                             "a save of this entry did not go through.")
conflict_option = click.option(
    "--on-conflict", type=click.Choice(CHOICES),
    help="What to do if someone else changed the same lines meanwhile (default: ask on a "
         "terminal, else keep the draft and exit 3).")


def show_entry(ctx: Ctx, entry: dict, raw: bool) -> None:
    out = ctx.out
    if raw or not out.tty:
        out.line(entry.get("body", ""))
        return
    meta = [f"entry {entry['id']}", entry.get("date", ""), f"revision {entry.get('revision')}"]
    if entry.get("status") == "draft":
        meta.append("draft")
    out.print(Text(entry.get("title", ""), style="title"))
    out.print(Text.assemble((" · ".join(meta), "muted"), "  ", tags_text(entry.get("tags", []))))
    out.print("")
    out.markdown(entry.get("body", ""))


@click.command("show", short_help="Show an entry.")
@click.argument("entry_id", type=click.IntRange(1))
@click.option("--raw", is_flag=True, help="The markdown as stored, not rendered.")
@json_option
@pass_ctx
def show(ctx: Ctx, entry_id, raw, as_json):
    """Show an entry: rendered on a terminal, its markdown in a pipe.

    \b
    Examples:
      cpl show 12
      cpl show 12 --raw > note.md
      cpl show 12 --json | jq .tags
    """
    entry = ctx.api.get(f"/api/v1/entries/{entry_id}")
    if as_json:
        print_json(entry_full(entry, ctx.api.server))
    else:
        show_entry(ctx, entry, raw)


@click.command("edit", short_help="Edit an entry in $EDITOR.")
@click.argument("entry_id", type=click.IntRange(1))
@resume_option
@conflict_option
@pass_ctx
def edit(ctx: Ctx, entry_id, resume, on_conflict):
    """Edit an entry in $VISUAL / $EDITOR; it is saved from the revision you started from.

    Nothing changed, nothing sent. If the same lines were changed elsewhere meanwhile,
    your text is kept as a draft, both sides are shown, and you choose: merge, overwrite
    or keep (exit 3). Changes to other lines merge by themselves.

    \b
    Examples:
      cpl edit 12
      EDITOR="code --wait" cpl edit 12
      cpl edit 12 --resume                 # send the draft a conflict kept
      cpl edit 12 --on-conflict merge
    """
    editing = Editing(ctx.api, ctx.out, ctx.config, on_conflict)
    done(editing.entry(entry_id, resume=resume))


def week_name(value: str | None) -> str:
    today = dt.date.today()
    offsets = {None: 0, "this": 0, "last": -7, "next": 7}
    if value in offsets:
        year, week, _ = (today + dt.timedelta(days=offsets[value])).isocalendar()
        return f"{year}-W{week:02d}"
    if not WEEK_RE.match(value):
        raise click.BadParameter("a week is YYYY-Www (e.g. 2024-W13), this, last or next",
                                 param_hint="WEEK")
    return value


def fetch_week(ctx: Ctx, value: str | None) -> dict:
    name = week_name(value)
    try:
        return ctx.api.get(f"/api/v1/weeks/{name}")
    except ApiError as exc:
        if exc.status != 404 or value not in (None, "this"):
            raise
    # The server's week can differ from this machine's near midnight on Sunday (another
    # time zone): its newest letter is the one it calls this week's.
    latest = ctx.api.get("/api/v1/entries", kind="week", limit=1).get("entries") or []
    if not latest:
        raise ApiError(404, "not_found", f"the server has no letter for {name}", {})
    ctx.out.note(f"the server has no letter for {name}; showing its newest, {latest[0]['week']}")
    return ctx.api.get(f"/api/v1/weeks/{latest[0]['week']}")


@click.command("week", short_help="This week's letter (or another's); --edit it.")
@click.argument("week", required=False)
@click.option("--edit", "-e", "editing", is_flag=True, help="Open the letter in your editor.")
@click.option("--raw", is_flag=True, help="The markdown as stored, not rendered.")
@resume_option
@conflict_option
@json_option
@pass_ctx
def week(ctx: Ctx, week, editing, raw, resume, on_conflict, as_json):
    """This week's letter (made on demand), or another week's: print it, or --edit it.

    WEEK is YYYY-Www, this (the default), last or next.

    \b
    Examples:
      cpl week
      cpl week last
      cpl week 2024-W13 --raw > letter.md
      cpl week --edit
    """
    data = fetch_week(ctx, week)
    letter = data["letter"]
    if editing or resume:
        done(Editing(ctx.api, ctx.out, ctx.config, on_conflict).entry(letter["id"],
                                                                      resume=resume))
        return
    if as_json:
        print_json({"week": letter.get("week"), "letter": entry_full(letter, ctx.api.server),
                    "entries": [entry_summary(e, ctx.api.server) for e in data["entries"]]})
        return
    show_entry(ctx, letter, raw)
    others = [e for e in data.get("entries") or [] if e["id"] != letter["id"]]
    if others and ctx.out.tty and not raw:
        ctx.out.print(Text(f"\nentries of {letter.get('week')}:", style="bold"))
        for e in others:
            ctx.out.print(Text.assemble((f"{e['id']:>5}", "id"), "  ", (e["date"], "date"),
                                        "  ", e["title"], "  ", tags_text(e.get("tags", []))))


@click.command("search", short_help="Ranked full-text search.")
@click.argument("query", nargs=-1, required=True)
@click.option("-n", "--limit", type=click.IntRange(1, 100), default=10, show_default=True,
              help="How many results.")
@json_option
@pass_ctx
def search(ctx: Ctx, query, limit, as_json):
    """Ranked full-text search with snippets.

    Words are all required; "a phrase", prefix*, a OR b, -exclude, and the filters
    tag:gpu, from:2024-01-01, to:2024-03-31, week:2024-W13, kind:week.

    \b
    Examples:
      cpl search pipeline bubble
      cpl search 'zero* tag:gpu from:2024-01-01'
      cpl search '"activation memory"' -n 3 --json
    """
    text = " ".join(query)
    data = ctx.api.get("/api/v1/search", q=text, limit=limit)
    hits = data.get("results") or []
    out = ctx.out
    if as_json:
        print_json({"query": text, "has_more": data.get("has_more", False),
                    "results": [search_hit(h, ctx.api.server, snippet(h.get("snippet", ""),
                                                                       False)) for h in hits]})
        return
    if not hits:
        out.note(f"nothing matches {text!r}")
        return
    for hit in hits:
        if not out.tty:
            out.tsv(hit["id"], hit["date"], hit["title"], snippet(hit.get("snippet", ""), False),
                    ctx.api.absolute(hit["url"]))
            continue
        out.print(Text.assemble((f"{hit['id']:>5}", "id"), "  ", (hit["title"], "title"), "  ",
                                (hit["date"], "date"), "  ", tags_text(hit.get("tags", []))))
        # indented as a block: a snippet wider than the terminal wraps under itself
        out.print(Padding(snippet(hit.get("snippet", ""), True), (0, 0, 0, 7)))
    if data.get("has_more") and out.tty:
        out.print(Text(f"more results: -n {min(100, limit * 2)}", style="muted"))
