"""The sharding view: a run's model block by block, each parameter a tile coloured by the
rank(s) that own it, under every strategy the run compared (or the new-run form offers),
with a switch between them, a legend and what each rank holds in all.

Server-rendered HTML that works without JavaScript: the form's switch is radio buttons and
:checked rules in app/static/sharding.css; a run page's is links, its page drawing one
strategy's panel and `panel_of_run` the others alone; repeated blocks collapse into one row
("blocks 0–3 ×4") that a <details> expands, and every tile says its owners in its title;
app/static/sharding.js adds the tap (or Enter) that shows a tile's details in the panel.
The data is jobs/lab/predict/layout.py's (torch-free), which follows what the strategies do.

    for_run(experiment, params, result)   a run page's view ("" when there is no model)
    panel_of_run(…, strategy)             one strategy's panel of it, alone
    for_params(experiment, params)        the form's: every strategy the experiment offers

Everything printed here is escaped; anything a result holds that does not fit is left
out rather than guessed at, and a strategy that cannot lay the model out says why.
"""

from __future__ import annotations

import functools
import json
from html import escape
from typing import Any
from urllib.parse import quote

from app.journal.views.shard_tiles import rows, swatch
from jobs.lab.catalogue import registry
from jobs.lab.predict.layout import Layout, Model, layout, nbytes

MAX_STRATEGIES = 12  # the stylesheet's switch has rules for this many panels
RANK_COLOURS = 8  # ranks past these are told apart by their labels


def trains_a_model(experiment: str) -> bool:
    spec = registry.EXPERIMENTS.get(experiment)
    return spec is not None and "layers" in spec["params"]


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _described(params: dict) -> dict:
    """A model description from a run's parameters (a result's `model` is one already)."""
    dtype = "bfloat16" if params.get("precision") == "bf16_adamw" else params.get("dtype")
    return {**params, "dtype": dtype or "float32"}


def _measured(entry: dict) -> list[int] | None:
    memory = entry.get("memory")
    if not isinstance(memory, list):
        return None
    out = []
    for m in memory:
        value = m.get("measured", {}).get("params") if isinstance(m, dict) and \
            isinstance(m.get("measured"), dict) else None
        if not isinstance(value, int) or isinstance(value, bool):
            return None
        out.append(value)
    return out or None


def _run_inputs(experiment: str, params: Any, result: Any) -> tuple[dict, list] | None:
    """(the model, [(strategy, ranks, measured bytes or None)]) of a run, or None."""
    if not trains_a_model(experiment) or not isinstance(params, dict):
        return None
    result = result if isinstance(result, dict) else {}
    model = result.get("model") if isinstance(result.get("model"), dict) else \
        _described(params)
    world = _int(params.get("world_size"), 1)
    entries = result.get("strategies") if isinstance(result.get("strategies"), list) else []
    chosen = [(e["strategy"], _int(e.get("ranks"), world), _measured(e)) for e in entries
              if isinstance(e, dict) and isinstance(e.get("strategy"), str)]
    if not chosen:
        names = params.get("strategies") if isinstance(params.get("strategies"), list) \
            else ["single"]
        chosen = [(n, 1 if n == "single" else world, None) for n in names
                  if isinstance(n, str)]
    return model, chosen


def for_run(experiment: str, params: Any, result: Any, uid: str = "shard-run",
            shown: str | None = None, links: tuple[str, str] | None = None) -> str:
    """The view of a run: the strategies its result reports (with the parameter bytes each
    rank measured), or, before there is a result, those its parameters name.

    With `links` (the run page's URL, and the prefix its panels are served under) only
    the panel of `shown` (or of the first strategy) is drawn; the others are links, to
    the page showing them (without JavaScript) and to their panel alone, which
    app/static/sharding.js fetches when the reader picks one: most of a run page's
    weight is the panels nobody has looked at yet."""
    found = _run_inputs(experiment, params, result)
    if found is None:
        return ""
    model, chosen = found
    if shown not in [name for name, _, _ in chosen]:
        shown = None  # what a link may ask for is not a key of the cache
    return _view(model, params, chosen, uid, shown, links)


def panel_of_run(experiment: str, params: Any, result: Any, strategy: str,
                 uid: str = "shard-run") -> str:
    """One strategy's panel of a run's view, as the run page would draw it ("" when the
    run has no such strategy, or it cannot lay the model out)."""
    found = _run_inputs(experiment, params, result)
    if found is None:
        return ""
    model, chosen = found
    if strategy not in [name for name, _, _ in chosen]:
        return ""
    return _view(model, params, chosen, uid, strategy, None, alone=True)


def for_params(experiment: str, params: dict, uid: str = "shard-form") -> str:
    """The view of parameters about to run, under every strategy the experiment offers."""
    if not trains_a_model(experiment):
        return ""
    spec = registry.describe(experiment)["params"]
    names = spec["strategies"]["choices"] if "strategies" in spec else ["single"]
    world = _int(params.get("world_size"), 1)
    chosen = [(n, 1 if n == "single" else world, None) for n in names]
    return _view(_described(params), params, chosen, uid)


def _view(model: dict, params: dict, chosen: list, uid: str, shown: str | None = None,
          links: tuple[str, str] | None = None, alone: bool = False) -> str:
    """Drawn once per distinct input: a finished run's page is read far more often than
    its result changes, and drawing every strategy's tiles is most of the page's time."""
    args = [model, params, chosen, uid, shown, links, alone]
    try:
        key = json.dumps(args, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError):  # not plain JSON data: draw it, keep nothing
        return _draw(*args)
    return _drawn(key)


@functools.lru_cache(maxsize=32)  # few: a view is a large page of HTML
def _drawn(key: str) -> str:
    return _draw(*json.loads(key))


def _laid_out(m: Model, params: dict, chosen: list) -> tuple[list, list[str]]:
    """([(layout, measured bytes or None)], why each strategy that cannot was refused)."""
    made, refused = [], []
    for name, world, measured in chosen[:MAX_STRATEGIES]:
        try:
            lay = layout(m, name, world, micro_batches=params.get("micro_batches", 1),
                         bucket_cap_mb=params.get("bucket_cap_mb", 0.25),
                         batch_size=params.get("batch_size", 8),
                         virtual_stages=params.get("virtual_stages", 1))
        except (ValueError, TypeError) as exc:
            refused.append(f"{name}: {exc}")
            continue
        if measured is not None and len(measured) != lay.world:
            measured = None
        made.append((lay, measured))
    return made, refused


def _draw(model: dict, params: dict, chosen: list, uid: str, shown: str | None,
          links: list[str] | tuple[str, str] | None, alone: bool) -> str:
    try:
        m = Model.of(model)
    except (ValueError, TypeError, AttributeError):
        return ""
    made, refused = _laid_out(m, params, chosen)
    names = [lay.strategy for lay, _ in made]
    if alone:
        if shown not in names:
            return ""
        i = names.index(shown)
        return _panel(*made[i], f"{uid}-{i}")
    if not made and not refused:
        return ""
    kind = "GPT" if m.kind == "gpt" else "residual MLP stack"
    heads = f", {m.heads} heads" if m.kind == "gpt" else ""
    tied = ", head tied to wte" if m.kind == "gpt" and m.tie_head else ""
    lead = (f'<p class="shard-lead">{kind}: {m.layers} blocks, h = {m.hidden:,}{heads}, '
            f"s = {m.seq_len:,}, v = {m.vocab:,}{tied}: {m.param_count():,} parameters. "
            "Each tile is one parameter tensor, coloured by the rank(s) that own it; "
            "tap or focus one for its shapes, bytes, owners and traffic.</p>")
    out = [f'<div class="sharding" id="{escape(uid)}" data-sharding>', lead]
    if links is not None and len(made) > 1:
        i = names.index(shown) if shown in names else 0
        out += [_links(names, i, uid, *links), '<div class="shard-slot">',
                _panel(*made[i], f"{uid}-{i}"), "</div>"]
        out += [f'<p class="hint shard-refused">{escape(line)}</p>' for line in refused]
        return "".join(out) + "</div>"
    if len(made) > 1:
        out += [f'<input type="radio" class="shard-pick" name="{escape(uid)}" '
                f'id="{escape(uid)}-{i}" aria-label="{escape(lay.strategy)}"'
                f'{" checked" if i == 0 else ""}>' for i, (lay, _) in enumerate(made)]
        out.append('<div class="shard-tabs" aria-hidden="true"><span class="hint">'
                   'Strategy:</span> ' + "".join(
                       f'<label for="{escape(uid)}-{i}">{escape(lay.strategy)}</label>'
                       for i, (lay, _) in enumerate(made)) + "</div>")
    out += [_panel(lay, measured, f"{uid}-{i}") for i, (lay, measured) in enumerate(made)]
    out += [f'<p class="hint shard-refused">{escape(line)}</p>' for line in refused]
    return "".join(out) + "</div>"


def _links(names: list[str], current: int, uid: str, page: str, panels: str) -> str:
    """The switch as links: to the page showing a strategy (a plain link works without
    JavaScript) and, in data-src, to its panel alone; role=status says which was loaded."""
    here = ' aria-current="true"'
    items = [f'<a href="{escape(page)}?sharding={quote(name)}#{escape(uid)}" '
             f'data-src="{escape(panels)}{quote(name)}"'
             f'{here if i == current else ""}>{escape(name)}</a>'
             for i, name in enumerate(names)]
    return (f'<nav class="shard-tabs shard-links" aria-label="Strategy"><span class="hint">'
            f'Strategy:</span> {"".join(items)}</nav>'
            '<p class="shard-status visually-hidden" role="status"></p>')


def _legend(lay: Layout) -> str:
    items = [f'<li>{swatch(f"r{r}" if r < RANK_COLOURS else "rx")}rank {r}</li>'
             for r in range(lay.world)]
    if any(t.split == "replicated" for b in lay.blocks for t in b.tensors):
        items.append(f"<li>{swatch('all')}every rank (a full copy)</li>")
    if lay.strategy in ("zero1", "zero2"):
        items.append('<li class="hint">colours: who owns the optimizer state'
                     + (" and gradient" if lay.strategy == "zero2" else "")
                     + " of each range; the parameters are whole everywhere</li>")
    return '<ul class="shard-legend">' + "".join(items) + "</ul>"


def _ranks(lay: Layout, measured: list[int] | None) -> str:
    P = lay.model.param_count()
    held, owned = lay.held_bytes(), lay.owned_elements()
    head = ('<thead><tr><th scope="col">rank</th><th scope="col">parameters held</th>'
            + ('<th scope="col">measured</th>' if measured else "")
            + '<th scope="col">owns</th></tr></thead>')
    body = []
    for r in range(lay.world):
        cls = f"r{r}" if r < RANK_COLOURS else "rx"
        share = f"{owned[r] / P:.0%} of the model" if P else "–"
        if lay.strategy in ("zero1", "zero2"):
            share = f"{owned[r]:,} elements' update ({share})"
        cells = [f"<th scope=\"row\">{swatch(cls)}{r}</th>",
                 f'<td class="num">{nbytes(held[r])}</td>']
        if measured:
            cells.append(f'<td class="num">{nbytes(measured[r])}</td>')
        cells.append(f"<td>{escape(share)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    caption = (f"<caption>Per rank: the parameter bytes it keeps ({lay.e} bytes an element)"
               + (", and what the run measured" if measured else "") + "</caption>")
    return (f'<div class="table-wrap"><table class="kv-table shard-ranks">{caption}{head}'
            f'<tbody>{"".join(body)}</tbody></table></div>')


def _panel(lay: Layout, measured: list[int] | None, pid: str) -> str:
    ranks = "1 rank" if lay.world == 1 else f"{lay.world} ranks"
    summary = "".join(f"<li>{escape(line)}</li>" for line in lay.summary)
    return (f'<section class="shard-panel" aria-labelledby="{escape(pid)}-h" '
            f'data-strategy="{escape(lay.strategy)}">'
            f'<h3 id="{escape(pid)}-h">{escape(lay.strategy)} <span class="hint">'
            f"{escape(lay.label)} · {ranks}</span></h3>"
            f'<ul class="shard-summary">{summary}</ul>{_legend(lay)}'
            f'<div class="shard-blocks">{rows(lay.blocks, lay.e, lay.strategy)}</div>'
            f'<output class="shard-detail" aria-live="polite">Tap a tile: its shapes, bytes, '
            f"owners and what moves for it.</output>{_ranks(lay, measured)}</section>")
