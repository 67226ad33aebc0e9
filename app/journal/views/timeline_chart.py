"""The measured timeline of one step as inline SVG: ranks as rows, time across.

Each rank has a header line, a thin strip with the ideal schedule's slots (pipelines
only), its compute lane (forward and backward blocks per micro-batch, the optimizer, and
the idle time between them shaded by cause) and its communication lanes (sends,
receives, collectives; overlapping ones stacked), with an arrow from every send to the
receive that got it.

Under the strict CSP there are no style attributes: colours are classes (timeline.css,
dark mode included), positions are presentation attributes. Across, every position is a
percentage of the chart's width and the text is in real pixels, so the chart fills any
screen without shrinking its labels (12 px on a phone); timeline.js zooms by rewriting
those percentages. Every block carries a <title>: the tooltip, the accessible name, and
what the details panel shows when the block is tapped.
"""

from __future__ import annotations

import math
from html import escape

from app.journal.numbers import si
from app.journal.views.timeline import Piece, StepView

AXIS, HEAD, IDEAL, COMPUTE, COMM, GAP = 22, 18, 7, 24, 11, 12
LABEL_MIN = 5.0  # % of the width a block needs for its label (12 px text at 343 px)
SHORT = {"forward": "F", "backward": "B", "optimizer": "opt", "schedule": "schedule"}


def pct(value: float) -> str:
    return f"{value:.3f}%"


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f}".rstrip("0").rstrip(".") + " ms"


def ticks(duration: float, most: int = 6) -> list[float]:
    """Round times (1, 2 or 5 × 10^k seconds apart) across [0, duration]."""
    if duration <= 0:
        return [0.0]
    raw = duration / most
    base = 10 ** math.floor(math.log10(raw))
    step = next(m * base for m in (1, 2, 5, 10) if m * base >= raw)
    return [i * step for i in range(int(duration / step) + 1)]


def block_text(rank: int, p: Piece) -> str:
    """What a block is, in one line: its tooltip and its details."""
    e = p.event
    when = f"{ms(p.t0)}–{ms(p.t1)} ({ms(p.t1 - p.t0)})"
    if e is None:
        return f"rank {rank} · idle: {p.label} · {when}"
    parts = [f"rank {rank}", e.kind]
    if e.kind in ("forward", "backward") and e.mb is not None:
        parts[1] = f"{SHORT[e.kind]}{e.mb} · {e.kind}"
    if e.mb is not None:
        parts.append(f"micro-batch {e.mb}")
    if e.stage is not None:
        parts.append(f"stage {e.stage}")
    if e.peer is not None:
        parts.append(f"{'to' if e.kind == 'send' else 'from'} rank {e.peer}")
    if e.dir:
        parts.append(f"direction {e.dir}")
    if e.bytes is not None:
        parts.append(si(e.bytes, "B"))
    if e.bucket is not None:
        parts.append(f"bucket {e.bucket}")
    if e.op:
        parts.append(f"op {e.op}")
    if e.asynchronous:
        parts.append("asynchronous")
    return " · ".join(parts + [when])


def block_label(p: Piece) -> str:
    e = p.event
    if e is not None and e.kind in ("forward", "backward") and e.mb is not None:
        return f"{SHORT[e.kind]}{e.mb}"
    return SHORT.get(p.kind, "")


def kind_class(kind: str) -> str:
    if kind in ("forward", "backward", "optimizer", "schedule", "send", "recv"):
        return f"tl-{kind}"
    return "tl-coll" if kind.startswith("all_") or kind in ("reduce_scatter", "broadcast") \
        else "tl-other"


def rect(p: Piece, duration: float, y: float, h: float, cls: str, text: str,
         label: str = "") -> str:
    a, b = p.t0 / duration * 100, p.t1 / duration * 100
    out = (f'<rect class="{cls}" x="{pct(a)}" y="{y}" width="{pct(max(b - a, 0.05))}" '
           f'height="{h}" tabindex="0"><title>{escape(text)}</title></rect>')
    if label:
        hidden = "" if b - a >= LABEL_MIN else " tl-hide"
        out += (f'<text class="tl-label{hidden}" x="{pct((a + b) / 2)}" y="{y + h / 2 + 4}" '
                f'text-anchor="middle" data-w="{pct(b - a)}">{escape(label)}</text>')
    return out


def rank_header(lane, view: StepView) -> str:
    words = [f"rank {lane.rank}"]
    if lane.stage is not None and view.ideal is not None:
        words.append(f"stage {lane.stage}")
    if lane.span_s > 0:
        idle = 1 - lane.busy_s / lane.span_s
        words.append(f"idle {idle:.0%}")
    if lane.bubble is not None and view.ideal is not None:
        words.append(f"bubble {lane.bubble:.0%}")
    return " · ".join(words)


def chart(view: StepView, chart_id: str) -> str:
    """The SVG of one step."""
    d = view.duration or 1e-9
    parts: list[str] = []
    meets: dict[int, float] = {}  # id(piece) → the y where an arrow meets it
    y = AXIS
    for lane in view.ranks:
        parts.append(f'<text class="tl-rank" x="2" y="{y + 13}">{escape(rank_header(lane, view))}'
                     "</text>")
        y += HEAD
        if view.ideal is not None and lane.stage is not None:
            for slot in (s for s in view.ideal.slots if s.stage == lane.stage):
                piece = Piece(slot.kind, view.ideal_start + slot.t0, view.ideal_start + slot.t1)
                mean = view.ideal.t_f if slot.kind == "forward" else view.ideal.t_b
                text = (f"ideal {view.ideal.name}: {SHORT[slot.kind]}{slot.mb} on stage "
                        f"{slot.stage} at the mean {slot.kind} time {ms(mean)} · "
                        f"{ms(piece.t0)}–{ms(piece.t1)}")
                parts.append(rect(piece, d, y, IDEAL, f"tl-ideal tl-{slot.kind}", text))
            y += IDEAL + 2
        a, b = lane.t0 / d * 100, lane.t1 / d * 100  # the rank's own step
        parts.append(f'<rect class="tl-lane" x="{pct(a)}" y="{y}" width="{pct(b - a)}" '
                     f'height="{COMPUTE}"/>')
        for p in lane.idle:
            parts.append(rect(p, d, y, COMPUTE, f"tl-idle tl-idle-{p.cause}",
                              block_text(lane.rank, p)))
        for p in lane.compute:
            parts.append(rect(p, d, y, COMPUTE, f"tl-block {kind_class(p.kind)}",
                              block_text(lane.rank, p), block_label(p)))
        y += COMPUTE + 2
        for p in lane.comm:
            top = y + p.lane * (COMM + 2)
            parts.append(rect(p, d, top, COMM, f"tl-block tl-comm {kind_class(p.kind)}",
                              block_text(lane.rank, p)))
            meets[id(p)] = top + COMM / 2
        y += lane.comm_lanes * (COMM + 2) + GAP
    for send, recv in view.arrows:
        parts.append(f'<line class="tl-arrow" x1="{pct(send.t0 / d * 100)}" '
                     f'y1="{meets[id(send)]}" x2="{pct(recv.t1 / d * 100)}" '
                     f'y2="{meets[id(recv)]}" '
                     f'marker-end="url(#{chart_id}-head)"/>')
    axis = []
    for t in ticks(d):
        x = t / d * 100
        anchor = "end" if x > 92 else "start" if x < 3 else "middle"
        axis.append(f'<line class="tl-tick" x1="{pct(x)}" y1="{AXIS - 4}" x2="{pct(x)}" '
                    f'y2="{y}"/><text class="tl-tick-label" x="{pct(x)}" y="13" '
                    f'text-anchor="{anchor}">{escape(ms(t))}</text>')
    title = f"Step {view.step} of {view.strategy}, rank by rank ({ms(view.duration)})"
    return (f'<svg class="tl-chart" id="{chart_id}" width="100%" height="{y}" '
            f'xmlns="http://www.w3.org/2000/svg" font-size="12" role="group" '
            f'aria-label="{escape(title)}" data-duration-ms="{view.duration * 1e3:.6g}">'
            f"<title>{escape(title)}</title>"
            f'<defs><marker id="{chart_id}-head" viewBox="0 0 8 8" refX="7" refY="4" '
            f'markerWidth="7" markerHeight="7" orient="auto-start-reverse">'
            f'<path class="tl-arrowhead" d="M0,0 L8,4 L0,8 z"/></marker></defs>'
            f'<g class="tl-axis">{"".join(axis)}</g>'
            f'<g class="tl-rows">{"".join(parts)}</g></svg>')
