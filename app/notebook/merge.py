"""Three-way merge of an entry's text, line by line (diff3).

Two saves that started from the same revision (the base) changed it in two ways: "theirs"
is what was saved first (another device, the scheduler's result card), "mine" is the save
arriving now. Changes that touch different lines of the base combine by themselves; only
where both sides changed the same lines differently is there a conflict, and then the
offered text keeps both sides' lines (theirs, then mine), so taking it as offered loses
nothing.

Pure functions of strings: no database, no request.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Hunk:
    """Lines of the base that both sides changed differently (line numbers count from 1
    in the base; an insertion has start == end)."""

    start: int
    end: int
    base: list[str]
    theirs: list[str]
    mine: list[str]


@dataclass
class Merged:
    text: str  # the merge, with both sides' lines where they conflict
    conflicts: list[Hunk] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not self.conflicts


@dataclass(frozen=True)
class _Change:
    lo: int  # base lines [lo, hi) are replaced ...
    hi: int
    lines: tuple[str, ...]  # ... by these


def _changes(base: list[str], other: list[str]) -> list[_Change]:
    matcher = difflib.SequenceMatcher(None, base, other, autojunk=False)
    return [_Change(i1, i2, tuple(other[j1:j2]))
            for tag, i1, i2, j1, j2 in matcher.get_opcodes() if tag != "equal"]


def _overlaps(change: _Change, lo: int, hi: int) -> bool:
    """Does `change` touch the base lines [lo, hi) of a group of changes? Ranges that
    share a line overlap; an insertion overlaps a range it falls strictly inside, or
    another insertion at the same place. Changes that only meet at a boundary (one side
    edits line 5, the other line 6) combine."""
    if change.lo < hi and lo < change.hi:
        return True
    if change.lo == change.hi:  # an insertion
        return lo < change.lo < hi or (lo == hi == change.lo)
    return lo == hi and change.lo < lo < change.hi


def _side(base: list[str], changes: list[_Change], lo: int, hi: int) -> list[str]:
    """Base lines [lo, hi) as one side has them (its changes all lie within)."""
    out, at = [], lo
    for change in changes:
        out.extend(base[at:change.lo])
        out.extend(change.lines)
        at = change.hi
    out.extend(base[at:hi])
    return out


def merge(base: str, theirs: str, mine: str) -> Merged:
    if theirs == mine or base == theirs:
        return Merged(mine)
    if base == mine:
        return Merged(theirs)
    # Every line ends in a newline while merging: a saved body has none at its end, and
    # without this, appending to the last line on both sides would look like two edits
    # of the same line.
    base_lines, their_lines, my_lines = (_lines(t) for t in (base, theirs, mine))
    ours = [(c, "theirs") for c in _changes(base_lines, their_lines)]
    ours += [(c, "mine") for c in _changes(base_lines, my_lines)]
    ours.sort(key=lambda item: (item[0].lo, item[0].hi))

    groups: list[list[tuple[_Change, str]]] = []
    lo = hi = -1
    for change, side in ours:
        if groups and _overlaps(change, lo, hi):
            groups[-1].append((change, side))
            lo, hi = min(lo, change.lo), max(hi, change.hi)
        else:
            groups.append([(change, side)])
            lo, hi = change.lo, change.hi

    out: list[str] = []
    conflicts: list[Hunk] = []
    at = 0
    for group in groups:
        lo = min(c.lo for c, _ in group)
        hi = max(c.hi for c, _ in group)
        out.extend(base_lines[at:lo])
        theirs_part = _side(base_lines, [c for c, s in group if s == "theirs"], lo, hi)
        mine_part = _side(base_lines, [c for c, s in group if s == "mine"], lo, hi)
        original = base_lines[lo:hi]
        if theirs_part == mine_part or mine_part == original:
            out.extend(theirs_part)
        elif theirs_part == original:
            out.extend(mine_part)
        elif lo == hi:
            # Both added lines at the same place (a card under Experiments while the owner
            # wrote there too): keep both, theirs first, as if saved one after the other.
            out.extend(_joined(theirs_part, mine_part))
        else:
            conflicts.append(Hunk(lo + 1, hi + 1, _plain(original), _plain(theirs_part),
                                  _plain(mine_part)))
            out.extend(_joined(theirs_part, mine_part))
        at = hi
    out.extend(base_lines[at:])
    text = "".join(out)
    return Merged(text if mine.endswith("\n") else text.removesuffix("\n"), conflicts)


def _lines(text: str) -> list[str]:
    return (text if text.endswith("\n") or not text else text + "\n").splitlines(keepends=True)


def _joined(first: list[str], second: list[str]) -> list[str]:
    return [*first, *second]


def _plain(lines: list[str]) -> list[str]:
    return [line.rstrip("\n") for line in lines]


def merge_fields(base: dict, theirs: dict, mine: dict) -> tuple[dict, list[dict]]:
    """Mine's changed fields merged onto theirs, each against the base: the body line by
    line, the others whole (a title both sides changed differently is a conflict; one
    side's change wins over the other's silence). Returns (merged fields, conflicts); a
    conflicting field carries the offer that keeps both sides (mine, for a single value)."""
    merged: dict = {}
    conflicts: list[dict] = []
    for name, value in mine.items():
        if name == "body":
            result = merge(base["body"], theirs["body"], value)
            merged["body"] = result.text
            conflicts += [{"field": "body", "start": h.start, "end": h.end, "base": h.base,
                           "theirs": h.theirs, "mine": h.mine} for h in result.conflicts]
        elif value == base[name]:
            continue  # mine did not touch it: theirs stands
        elif theirs[name] in (base[name], value):
            merged[name] = value
        else:
            conflicts.append({"field": name, "base": base[name], "theirs": theirs[name],
                              "mine": value})
            merged[name] = value
    return merged, conflicts
