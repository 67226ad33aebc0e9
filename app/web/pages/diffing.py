"""Readable diffs for the history and merge pages: line-based, with the changed characters
inside a changed line marked. Every piece of text is escaped here, so the rows can go into
a page as they are."""

from __future__ import annotations

import difflib
import html
import re
from dataclasses import dataclass

CONTEXT = 3  # unchanged lines kept around each change
INTRALINE_LIMIT = 2000  # longer lines are marked whole: character diffs of them are slow
SIMILAR = 0.5  # lines at least this alike (in words) are shown as one line edited
TOKEN_RE = re.compile(r"\w+|\s+|[^\w\s]")


@dataclass(frozen=True)
class Row:
    kind: str  # "same" | "del" | "add" | "skip"
    old: int | None  # line numbers, 1-based
    new: int | None
    html: str  # escaped text, with <del>/<ins> around changed characters


@dataclass(frozen=True)
class FieldChange:
    name: str
    old: str
    new: str


def _words(line: str) -> list[str]:
    return TOKEN_RE.findall(line)


def _similar(old: list[str], new: list[str]) -> bool:
    return difflib.SequenceMatcher(None, old, new, autojunk=False).ratio() >= SIMILAR


def _intraline(old: list[str], new: list[str]) -> tuple[str, str]:
    """Two versions of a line with the changed words marked (whole words read better
    than scattered letters)."""
    out_old, out_new = [], []
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    for op, a1, a2, b1, b2 in matcher.get_opcodes():
        a_text, b_text = html.escape("".join(old[a1:a2])), html.escape("".join(new[b1:b2]))
        if op == "equal":
            out_old.append(a_text)
            out_new.append(b_text)
            continue
        if a_text:
            out_old.append(f"<del>{a_text}</del>")
        if b_text:
            out_new.append(f"<ins>{b_text}</ins>")
    return "".join(out_old), "".join(out_new)


def _changed_block(old: list[str], new: list[str], a1: int, b1: int) -> list[Row]:
    """A replaced block: similar lines are paired and marked inside; the rest whole."""
    rows: list[Row] = []
    dels: list[Row] = []
    adds: list[Row] = []
    for i in range(max(len(old), len(new))):
        a = old[i] if i < len(old) else None
        b = new[i] if i < len(new) else None
        pairable = (a is not None and b is not None
                    and len(a) <= INTRALINE_LIMIT and len(b) <= INTRALINE_LIMIT)
        a_words, b_words = (_words(a), _words(b)) if pairable else ([], [])
        if pairable and _similar(a_words, b_words):
            a_html, b_html = _intraline(a_words, b_words)
        else:
            a_html = html.escape(a) if a is not None else ""
            b_html = html.escape(b) if b is not None else ""
        if a is not None:
            dels.append(Row("del", a1 + i + 1, None, a_html))
        if b is not None:
            adds.append(Row("add", None, b1 + i + 1, b_html))
    rows.extend(dels)
    rows.extend(adds)
    return rows


def line_diff(old_text: str, new_text: str, context: int = CONTEXT) -> list[Row]:
    """Rows of a unified diff of two texts; [] when they are the same."""
    old, new = old_text.split("\n"), new_text.split("\n")
    if old == new:
        return []
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    rows: list[Row] = []
    opcodes = matcher.get_opcodes()
    for index, (op, a1, a2, b1, b2) in enumerate(opcodes):
        if op == "equal":
            first, last = index == 0, index == len(opcodes) - 1
            keep_head = 0 if first else context
            keep_tail = 0 if last else context
            length = a2 - a1
            if length <= keep_head + keep_tail + 1:
                spans = [(0, length)]
            else:
                spans = [(0, keep_head), (length - keep_tail, length)]
            for n, (s, e) in enumerate(spans):
                if n == 1:
                    hidden = spans[1][0] - spans[0][1]
                    rows.append(Row("skip", None, None,
                                    f"{hidden} unchanged line{'s' if hidden != 1 else ''}"))
                for i in range(s, e):
                    rows.append(Row("same", a1 + i + 1, b1 + i + 1, html.escape(old[a1 + i])))
        elif op == "delete":
            rows.extend(Row("del", a1 + i + 1, None, html.escape(old[a1 + i]))
                        for i in range(a2 - a1))
        elif op == "insert":
            rows.extend(Row("add", None, b1 + i + 1, html.escape(new[b1 + i]))
                        for i in range(b2 - b1))
        else:
            rows.extend(_changed_block(old[a1:a2], new[b1:b2], a1, b1))
    return rows


def field_changes(old: dict[str, str], new: dict[str, str]) -> list[FieldChange]:
    """Changed short fields (title, date, tags, status), in the order of `old`."""
    return [FieldChange(name, old[name], new.get(name, "")) for name in old
            if old[name] != new.get(name, "")]


def stats(rows: list[Row]) -> tuple[int, int]:
    """(lines added, lines removed)."""
    return (sum(r.kind == "add" for r in rows), sum(r.kind == "del" for r in rows))
