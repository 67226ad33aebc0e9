"""Who sends how much to whom: a rank × rank matrix of bytes per timed step, from the
sends and collectives the lab logged, and its heat-map (an SVG grid, numbers in cells).

A cell (i, j) holds the bytes rank i put on the wire to rank j in an average timed step:

    send               its bytes, to its peer (receives are the other end of a send and
                       are not counted again)
    collective of S    S × f to the next rank of a ring over the strategy's n ranks, where
    bytes over n ranks f is nccl-tests' bus-bandwidth factor (jobs.lab.predict.cost
                       .busbw_factor): 2(n−1)/n for all_reduce, (n−1)/n for all_gather,
                       reduce_scatter and all_to_all, 1 for broadcast. That is what a ring
                       algorithm moves per rank; a tree or NVLS moves it differently.

So a row's sum is what the rank counted (result.json's comm, per step) with each
collective weighted by f. Strategies whose collectives PyTorch issues itself (FSDP2,
torch pipelining) log none, and their matrix is empty.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape

from app.journal.numbers import si
from app.journal.views.rank_events import COLLECTIVES, RunEvents
from jobs.lab.predict.cost import busbw_factor

MAX_RANKS = 64  # drawn as a grid up to this many
CELL_W, CELL_H, LEFT, TOP = 68, 34, 64, 40
LEVELS = 4


@dataclass
class Traffic:
    strategy: str
    ranks: list[int]
    steps: int  # timed steps averaged over
    cells: dict[tuple[int, int], float]  # (from, to) → bytes per step
    kinds: list[str]  # what was counted

    @property
    def total(self) -> float:
        return sum(self.cells.values())

    def sent(self, rank: int) -> float:
        return sum(v for (i, _j), v in self.cells.items() if i == rank)


def matrix(found: RunEvents, strategy: str) -> Traffic:
    steps = found.timed_steps(strategy)
    ranks = found.ranks(strategy)
    n = len(ranks)
    ring = {r: ranks[(k + 1) % n] for k, r in enumerate(ranks)}
    cells: dict[tuple[int, int], float] = {}
    kinds: set[str] = set()
    for step in steps:
        for e in found.step_events(strategy, step):
            if e.bytes is None:
                continue
            if e.kind == "send" and e.peer is not None and e.peer != e.rank:
                to, moved = e.peer, float(e.bytes)
            elif e.kind in COLLECTIVES and n > 1:
                to, moved = ring[e.rank], e.bytes * busbw_factor(e.kind, n)
            else:
                continue
            kinds.add(e.kind)
            cells[(e.rank, to)] = cells.get((e.rank, to), 0.0) + moved
    if steps:
        cells = {key: value / len(steps) for key, value in cells.items()}
    return Traffic(strategy, ranks, len(steps), cells, sorted(kinds))


def level(value: float, top: float) -> int:
    """0 for nothing, else 1..LEVELS by the share of the largest cell."""
    if value <= 0 or top <= 0:
        return 0
    return max(1, min(LEVELS, math.ceil(value / top * LEVELS)))


def heatmap_svg(t: Traffic) -> str:
    """The grid: rows are senders, columns receivers, a last column with each row's sum."""
    ranks = t.ranks[:MAX_RANKS]
    n = len(ranks)
    top = max(t.cells.values(), default=0.0)
    width, height = LEFT + (n + 1) * CELL_W + 4, TOP + n * CELL_H + 4
    label = (f"Bytes per step from each rank (rows) to each rank (columns), "
             f"strategy {t.strategy}")
    out = [f'<svg class="tl-heat" viewBox="0 0 {width} {height}" width="{width}" '
           f'height="{height}" role="img" aria-label="{escape(label)}" '
           f'xmlns="http://www.w3.org/2000/svg" font-size="12">',
           f"<title>{escape(label)}</title>",
           f'<text class="tl-axis-name" x="{LEFT}" y="12">to rank →</text>']
    for c, rank in enumerate(ranks):
        x = LEFT + c * CELL_W + CELL_W / 2
        out.append(f'<text class="tl-heat-head" x="{x}" y="{TOP - 8}" '
                   f'text-anchor="middle">{rank}</text>')
    out.append(f'<text class="tl-heat-head" x="{LEFT + n * CELL_W + CELL_W / 2}" '
               f'y="{TOP - 8}" text-anchor="middle">sent</text>')
    for r, src in enumerate(ranks):
        y = TOP + r * CELL_H
        out.append(f'<text class="tl-heat-head" x="{LEFT - 8}" y="{y + CELL_H / 2 + 4}" '
                   f'text-anchor="end">rank {src}</text>')
        for c, dst in enumerate(ranks):
            value = t.cells.get((src, dst), 0.0)
            lvl = level(value, top)
            x = LEFT + c * CELL_W
            text = si(value, "B") if value else ("·" if src != dst else "–")
            out.append(f'<g class="tl-cell tl-heat-{lvl}"><rect x="{x + 1}" y="{y + 1}" '
                       f'width="{CELL_W - 2}" height="{CELL_H - 2}" rx="3"/>'
                       f'<text x="{x + CELL_W / 2}" y="{y + CELL_H / 2 + 4}" '
                       f'text-anchor="middle">{escape(text)}</text>'
                       f"<title>rank {src} → rank {dst}: {escape(si(value, 'B'))} per step"
                       f"</title></g>")
        x = LEFT + n * CELL_W
        out.append(f'<text class="tl-heat-sum" x="{x + CELL_W / 2}" y="{y + CELL_H / 2 + 4}" '
                   f'text-anchor="middle">{escape(si(t.sent(src), "B"))}</text>')
    out.append("</svg>")
    return "".join(out)


def caption(t: Traffic) -> str:
    """What a cell means, in words, for this strategy."""
    n = len(t.ranks)
    parts = [f"Mean over {t.steps} timed step{'s' if t.steps != 1 else ''}."]
    if "send" in t.kinds:
        parts.append("A send counts its bytes to its peer.")
    colls = [k for k in t.kinds if k in COLLECTIVES]
    if colls:
        factors = ", ".join(f"{k} {busbw_factor(k, n):.3g}" for k in colls)
        parts.append(f"A collective of S bytes over {n} ranks counts S × f to the next rank "
                     f"of a ring (nccl-tests' bus-bandwidth factor f: {factors}).")
    return " ".join(parts)
