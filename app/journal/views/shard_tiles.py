"""The sharding view's tiles: one parameter tensor drawn as a small box coloured by the
rank(s) that own it, and the rows of tiles a block (or a run of identical blocks) makes.

A tile is a button (focusable, Enter and Space press it) whose data-* attributes hold
everything app/static/sharding.js shows when it is pressed: the tensor's name, shape,
parameter count, bytes, which rank owns which part and keeps what, and what is
communicated for it and when. Its bar is an inline SVG drawn with presentation attributes
only (x=, width=; colours from classes in app/static/sharding.css, so dark mode works):
a 2-D weight is rows down and columns across, so a column-parallel split shows as bands,
a row-parallel one as stripes, a ZeRO range as the rows (and part rows) it covers.

Everything printed here is escaped.
"""

from __future__ import annotations

import math
from html import escape

from jobs.lab.predict.layout import FLAT, Block, Piece, Tensor, nbytes

W, H = 100, 12  # the bar's viewBox
MAX_TILED_LAYERS = 16  # a run of identical blocks longer than this lists its layers as text


def shape_text(shape: tuple[int, ...]) -> str:
    return " × ".join(f"{n:,}" for n in shape)


def _rects(piece: Piece, shape: tuple[int, ...]) -> list[tuple[float, float, float, float]]:
    """(x, y, width, height) in the bar's viewBox of what `piece` covers."""
    rows, cols = (shape[0], math.prod(shape[1:])) if len(shape) > 1 else (1, shape[0])
    if piece.dim is None:
        return [(0, 0, W, H)]
    if piece.dim == 1 or (piece.dim == 0 and len(shape) == 1):
        return [(W * piece.start / cols, 0, W * (piece.stop - piece.start) / cols, H)]
    if piece.dim == 0:
        return [(0, H * piece.start / rows, W, H * (piece.stop - piece.start) / rows)]
    a, b = piece.start, piece.stop  # FLAT: row-major, up to three rectangles
    first, last = a // cols, (b - 1) // cols
    row_h = H / rows
    if first == last:
        return [(W * (a % cols) / cols, first * row_h, W * (b - a) / cols, row_h)]
    out = [(W * (a % cols) / cols, first * row_h, W * (cols - a % cols) / cols, row_h)]
    if last > first + 1:
        out.append((0, (first + 1) * row_h, W, (last - first - 1) * row_h))
    out.append((0, last * row_h, W * ((b - 1) % cols + 1) / cols, row_h))
    return out


def bar(t: Tensor) -> str:
    owners = t.owners
    if t.split == "replicated" or (len(owners) > 1 and all(p.dim is None for p in t.pieces)):
        fills = [("all", (0, 0, W, H))]
    else:
        fills = [(f"r{p.rank}", r) for p in t.pieces if p.numel for r in _rects(p, t.shape)]
    rects = "".join(f'<rect class="{cls}" x="{x:.3g}" y="{y:.3g}" width="{w:.3g}" '
                    f'height="{h:.3g}"/>' for cls, (x, y, w, h) in fills)
    empty = "" if len(fills) == 1 and fills[0][1] == (0, 0, W, H) else \
        f'<rect class="shard-empty" width="{W}" height="{H}"/>'
    return (f'<svg class="shard-bar" viewBox="0 0 {W} {H}" preserveAspectRatio="none" '
            f'aria-hidden="true" focusable="false">{empty}{rects}</svg>')


# what a rank keeps of a flat range it owns, by strategy: ZeRO-1/2 keep the weights whole
# everywhere and shard their updates; ZeRO-3 keeps nothing else of the tensor
FLAT_HELD = {"zero2": " of the optimizer state and gradient",
             "zero3": ": its parameters, gradient and optimizer state"}


def owners_text(t: Tensor, e: int, strategy: str = "") -> str:
    if t.split == "replicated":
        return f"every rank, a full copy ({nbytes(t.numel * e)} each)"
    parts = []
    for p in t.pieces:
        if not p.numel:
            continue
        held = "" if p.dim != FLAT else FLAT_HELD.get(strategy, " of the optimizer state")
        parts.append(f"rank {p.rank}: {p.describe()}{held} ({shape_text(p.shape)})")
    return " · ".join(parts) or "no rank"


def held_text(t: Tensor, e: int) -> str:
    return " · ".join(f"rank {r}: {nbytes(n * e)}" if n else f"rank {r}: nothing"
                      for r, n in enumerate(t.held))


def merged(lines: list[str], layers: list[str]) -> str:
    """One sentence for the same tensor of several blocks: itself when they agree, else
    what they share with the part that differs given block by block ("… in bucket
    [block 0: 3 of 4; block 1: 2 of 4] as soon as …")."""
    if all(line == lines[0] for line in lines):
        return lines[0]
    if all(f"block {layer}" in line and line.replace(f"block {layer}", "its block")
           == lines[0].replace(f"block {layers[0]}", "its block")
           for line, layer in zip(lines, layers, strict=True)):
        return lines[0].replace(f"block {layers[0]}", "its block")  # each names its own
    words = [line.split(" ") for line in lines]
    head = 0
    while all(len(w) > head and w[head] == words[0][head] for w in words):
        head += 1
    tail = 0
    while all(len(w) - tail > head and w[-1 - tail] == words[0][-1 - tail] for w in words):
        tail += 1
    def middles() -> list[str]:
        return [" ".join(w[head:len(w) - tail]) for w in words]

    while any(m.count("(") != m.count(")") for m in middles()) and (head or tail):
        head, tail = (head - 1, tail) if tail == 0 else (head, tail - 1)
    parts = "; ".join(f"block {layer}: {m or '–'}"
                      for layer, m in zip(layers, middles(), strict=True))
    return " ".join([*words[0][:head], f"[{parts}]", *words[0][len(words[0]) - tail:]])


def swatch(cls: str) -> str:
    return (f'<svg class="shard-swatch" viewBox="0 0 10 10" aria-hidden="true" '
            f'focusable="false"><rect class="{cls}" width="10" height="10"/></svg>')


def label(t: Tensor) -> str:
    return t.short.replace(".weight", ".w").replace(".bias", ".b")


def tile(tensors: list[Tensor], e: int, where: str, block_comm: tuple[str, ...],
         strategy: str = "") -> str:
    """A tile for the tensor `tensors[0]` stands for: itself, or the same tensor of every
    block in a run of identical blocks (its traffic then listed per block if it differs)."""
    t = tensors[0]
    comm = [merged([u.comm[j] for u in tensors], [u.name.split(".")[1] for u in tensors])
            for j in range(len(t.comm))] + list(block_comm)
    name = t.short if len(tensors) > 1 else t.name
    owners = owners_text(t, e, strategy)
    data = {"name": name, "where": where, "shape": shape_text(t.shape),
            "params": f"{t.numel:,}", "bytes": nbytes(t.numel * e), "owners": owners,
            "held": held_text(t, e), "comm": " ¶ ".join(comm) or "nothing"}
    attrs = " ".join(f'data-{k}="{escape(v)}"' for k, v in data.items())
    cls = "shard-tile" + (" shard-vector" if len(t.shape) == 1 else "")
    return (f'<button type="button" class="{cls}" tabindex="0" {attrs} '
            f'title="{escape(name)} {escape(shape_text(t.shape))}: {escape(owners)}">'
            f'<span class="shard-name">{escape(label(t))}</span>'
            f'<span class="shard-shape">{escape(shape_text(t.shape))}</span>{bar(t)}</button>')


def tiles(blocks: list[Block], e: int, where: str, strategy: str = "") -> str:
    """The tiles of the first of `blocks`, each standing for that tensor in all of them."""
    return '<div class="shard-tiles">' + "".join(
        tile([b.tensors[j] for b in blocks], e, where, blocks[0].comm, strategy)
        for j in range(len(blocks[0].tensors))) + "</div>"


def ref_tiles(b: Block) -> str:
    """One block of a collapsed run, drawn again: its own names, the bars of the run's row
    (identical by construction, see `signature`), and for details a pointer to the row's
    tile of the same tensor (data-of), which already lists any per-block difference -
    so a run of L blocks does not repeat every tile's details L times."""
    return '<div class="shard-tiles">' + "".join(
        f'<button type="button" class="shard-tile shard-ref'
        f'{" shard-vector" if len(t.shape) == 1 else ""}" tabindex="0" '
        f'data-name="{escape(t.name)}" data-of="{j}" title="{escape(t.name)}">'
        f'<span class="shard-name">{escape(label(t))}</span>{bar(t)}</button>'
        for j, t in enumerate(b.tensors)) + "</div>"


def _span(blocks: list[Block]) -> str:
    if len(blocks) == 1:
        return blocks[0].label
    return f"blocks {blocks[0].index}–{blocks[-1].index}"


def row(blocks: list[Block], e: int, strategy: str = "") -> str:
    """One block, or a run of identical blocks: "blocks 0–3 ×4", expandable to each."""
    first, n = blocks[0], len(blocks)
    params = sum(t.numel for t in first.tensors)
    times = f' <span class="shard-times">×{n}</span>' if n > 1 else ""
    per = " each" if n > 1 else ""
    owners = {t.owners for t in first.tensors}
    (only,) = owners if len(owners) == 1 else [()]
    on = f" {swatch(f'r{only[0]}')}rank {only[0]}" if len(only) == 1 and only[0] < 8 else ""
    head = (f'<p class="shard-row-head"><strong>{escape(_span(blocks))}</strong>{times}{on} '
            f'<span class="hint">{params:,} parameters{per}, '
            f'{nbytes(params * e)}{per}</span></p>')
    notes = "".join(f'<p class="shard-row-note">{escape(line)}</p>'
                    for line in (*first.comm, *([first.note] if first.note else [])))
    out = [f'<div class="shard-row" data-block="{escape(first.key)}">', head, notes,
           tiles(blocks, e, _span(blocks), strategy)]
    if n > 1:
        out.append(f'<details class="shard-each"><summary>each of the {n} blocks</summary>')
        for b in blocks[:MAX_TILED_LAYERS]:
            out.append(f'<div class="shard-layer"><p class="shard-layer-head">'
                       f'{escape(b.label)}</p>{ref_tiles(b)}</div>')
        if n > MAX_TILED_LAYERS:
            rest = blocks[MAX_TILED_LAYERS:]
            out.append(f'<p class="hint">{escape(_span(rest))}: laid out as block '
                       f'{first.index}, their tensors named blocks.<i>i</i>.…</p>')
        out.append("</details>")
    return "".join(out) + "</div>"


def signature(b: Block) -> tuple:
    """What must match for blocks to share a row: every tensor's split, pieces and bytes
    held, and the block's own traffic."""
    return (b.key, b.comm, tuple((t.short, t.split, tuple((p.rank, p.shape, p.dim, p.start,
                                                           p.stop) for p in t.pieces),
                                  t.held) for t in b.tensors))


def rows(blocks: tuple[Block, ...], e: int, strategy: str = "") -> str:
    """Every block in order, consecutive identical transformer blocks collapsed."""
    runs: list[list[Block]] = []
    for b in blocks:
        if runs and b.key == "block" and runs[-1][0].key == "block" and \
                signature(runs[-1][0]) == signature(b):
            runs[-1].append(b)
        else:
            runs.append([b])
    return "".join(row(r, e, strategy) for r in runs)
