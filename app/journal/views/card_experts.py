"""The experts experiment's part of a training card: the tokens each expert got per
layer, those dropped at capacity, and the dense baseline timed beside the MoE step
(jobs/lab/strategies/experts.py's extra()). Every rank reports the same routing, summed
over the ranks, so rank 0's is shown."""

from __future__ import annotations

from html import escape

from app.journal.numbers import percent, seconds
from app.journal.views.lessons import num

MAX_EXPERTS, MAX_LAYERS = 64, 128


def _counts(row) -> list[int] | None:
    if not isinstance(row, list) or not row:
        return None
    values = [num(row, i) for i in range(min(len(row), MAX_EXPERTS))]
    return [int(v) for v in values] if all(v is not None for v in values) else None


def _table(e: dict) -> str:
    loads = e.get("load_per_expert") if isinstance(e.get("load_per_expert"), list) else []
    kept = e.get("kept_per_expert") if isinstance(e.get("kept_per_expert"), list) else []
    rows = []
    for i, row in enumerate(loads[:MAX_LAYERS]):
        load, held = _counts(row), _counts(kept[i] if i < len(kept) else None)
        if load is None:
            continue
        cells = "".join(f'<td class="num">{v}</td>' for v in load)
        dropped = sum(load) - sum(held) if held is not None and len(held) == len(load) else None
        rows.append(f"<tr><td>{i}</td>{cells}<td class=\"num\">"
                    f"{'–' if dropped is None else dropped}</td></tr>")
    if not rows:
        return ""
    width = max(len(_counts(r) or []) for r in loads[:MAX_LAYERS])
    head = "".join(f'<th scope="col">E{j}</th>' for j in range(width))
    return ('<table class="run-table card-experts"><thead><tr><th scope="col">layer</th>'
            f'{head}<th scope="col">dropped</th></tr></thead>'
            f"<tbody>{''.join(rows)}</tbody></table>")


def experts(strategies: list[dict]) -> str:
    """Per strategy with a routing report: its load table and the dense baseline."""
    parts = []
    for s in strategies:
        extra = s.get("extra") if isinstance(s.get("extra"), list) else []
        e = next((x for x in extra[:64] if isinstance(x, dict) and "load_per_expert" in x),
                 None)
        if e is None:
            continue
        name = escape(str(s.get("strategy") or "?")[:40])
        drop = num(e, "drop_fraction")
        line = (f"<p>{name}: tokens routed to each expert, per layer"
                + (f"; {percent(drop)} of the routed tokens dropped at capacity"
                   if drop is not None else "") + "</p>")
        dense, moe = num(e, "dense_baseline", "step_time_s"), \
            num(e, "dense_baseline", "moe_step_time_s")
        if dense and moe:
            what = escape(str((e.get("dense_baseline") or {}).get("what") or "dense")[:120])
            # Timed in a loop of its own, alternating with the MoE: its MoE time is not the
            # step time in the table above, and a learner comparing the two must know why.
            steps = num(e, "dense_baseline", "steps")
            over = f"{steps:g} steps each, " if steps else ""
            line += (f"<p>Dense baseline, {what}: timed step for step beside {name} ({over}"
                     f"apart from the step times above), {seconds(dense)} a step against "
                     f"{name}'s {seconds(moe)} there: {name} takes {moe / dense:.2f}× the "
                     "dense step</p>")
        parts.append(line + _table(e))
    return ("<details><summary>Experts: load per expert and drops</summary>"
            + "".join(parts) + "</details>") if parts else ""
