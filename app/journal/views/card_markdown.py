"""A run card as markdown: what a letter's file on disk (the notes mirror, an export)
holds for each ```run block, so a run's numbers stay in the owner's notes when the app is
gone: the caption, its key numbers as a table, the sentences it teaches, what changed
since the runs before, and its charts as an SVG file beside the notes. Read off the card
itself (cards.card, cards.image), so the file says what the page says. create_app
registers it with the notebook (embeds.register_markdown); the page keeps rendering the
live card.

No link leads to the app's pages, which a vault opened in Obsidian or on GitHub cannot
reach: the caption ends in the block id `^run-42` (`anchor`), and a run named in the
lines ("vs Sun 29 Nov (#41)") links the file of the folder that holds #41's card, at that
block, where the export has one (embeds.in_files' `link`), else stays plain text.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from html import unescape

from sqlalchemy.orm import Session

from app.journal import trends
from app.journal.views import card_trend, cards
from app.models import Run

_CAPTION_RE = re.compile(r"<figcaption>(.*?)</figcaption>", re.S)
_LESSON_RE = re.compile(r'<p class="card-lesson">(.*?)</p>', re.S)
_REASON_RE = re.compile(r'<p class="run-reason">(.*?)</p>', re.S)
_KEYS_RE = re.compile(r'<table class="run-table card-keys">(.*?)</table>', re.S)
_ROW_RE = re.compile(r"<tr>(.*?)</tr>", re.S)
_CELL_RE = re.compile(r"<t[hd][^>]*>(.*?)</t[hd]>", re.S)
_TAG_RE = re.compile(r"<[^>]+>")


def _text(html: str) -> str:
    return " ".join(unescape(_TAG_RE.sub("", html)).split())


def _cell(html: str) -> str:
    return _text(html).replace("|", "\\|") or " "


def _table(html: str) -> list[str]:
    """The card's key numbers (its first card-keys table) as a markdown table."""
    found = _KEYS_RE.search(html)
    rows = [[_cell(c) for c in _CELL_RE.findall(r)] for r in _ROW_RE.findall(found[1])] \
        if found else []
    if len(rows) < 2:
        return []
    head, *body = rows
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head),
            *("| " + " | ".join(row) + " |" for row in body)]


def anchor(source: str) -> str | None:
    """The block id a ```run block's card carries in files: `run-<id>`."""
    found = cards.RUN_ID_RE.search(source)
    return f"run-{found[1]}" if found else None


def linked_runs(text: str, link: Callable[[str], str | None], ids=None) -> str:
    """Markdown text with each "#N" (of `ids`, if given) a link to run N's card in the
    folder, where `link` knows one."""
    def one(m: re.Match) -> str:
        target = link(f"run-{m[1]}") if ids is None or int(m[1]) in ids else None
        return f"[{m[0]}]({target})" if target else m[0]
    return re.sub(r"#(\d+)\b", one, text)


def run_markdown(session: Session, source: str, timezone: str = "UTC",
                 link: Callable[[str], str | None] = lambda anchor: None
                 ) -> tuple[str, dict[str, str]]:
    """A ```run block's card as markdown, and its files ({name: SVG}); ("", {}) for a
    block that names no run."""
    found = cards.RUN_ID_RE.search(source)
    run = session.get(Run, int(found[1])) if found else None
    if run is None:
        return "", {}
    trend = trends.trend(session, run)
    html = cards.card(run, timezone, trend)
    caption = _text(_CAPTION_RE.search(html)[1])  # type: ignore[index]
    title = f"Run {run.id} · {cards.run_title(run)}"
    lines = [f"**{title}**{caption[len(title):]} ^run-{run.id}"]
    for pattern in (_REASON_RE, _LESSON_RE):
        lines += ["", *(_text(m) for m in pattern.findall(html))]
    changed = card_trend.lines(trend, timezone) if trend else []
    lines += ["", *(f"- {'**Regression:** ' if bad else ''}{linked_runs(text, link)}"
                    for text, bad in changed)] if changed else []
    table = _table(html)
    lines += ["", *table] if table else []
    picture = cards.image(run)
    files = {f"run-{run.id}.svg": picture[0]} if picture else {}
    return "\n".join(line for n, line in enumerate(lines) if line or lines[n - 1]), files
