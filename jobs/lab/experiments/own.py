"""The owner's own experiments, run: the file that declares one (catalogue/own.py reads
its declaration) is imported in every rank, and its ``run(lab, params)`` is called with a
`Lab`, the small reporting API documented in docs/EXPERIMENTS.md.

Rank 0 reports. Every rank runs the function, so every rank may call the reporting
methods, but only rank 0's calls are kept: a number that differs by rank is the
experiment's to gather (``lab.gather``) and rank 0's to report, as a table for instance.
That keeps the API free of collectives of its own, which would hang a run the moment
one rank reported something the others did not.
"""

from __future__ import annotations

import importlib.util
import math
import re
from typing import Any

import torch

from jobs.lab.catalogue import own
from jobs.lab.components.context import Context

NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
MAX_POINTS = 10_000  # per series: enough for a long run's every step
MAX_ROWS = 300  # per table, as many as a card shows
MAX_NAMES = 40  # of each kind


def _number(value: Any) -> float | int | None:
    """A float, or None for NaN and infinities (JSON has neither). A tensor is read
    with .item(): on CUDA that waits for the device, so report after the timed part."""
    if isinstance(value, torch.Tensor):
        value = value.item()
    if isinstance(value, int) and not isinstance(value, bool):
        return value  # a count stays a count
    number = float(value)
    return number if math.isfinite(number) else None


def _cell(value: Any) -> float | str | None:
    if isinstance(value, str):
        return value[:200]
    if value is None:
        return None
    return _number(value)


class Lab:
    """What ``run(lab, params)`` gets: where it runs, and how it reports.

    lab.rank, lab.world_size, lab.local_rank, lab.device (a torch.device), lab.backend,
    lab.is_cuda, lab.out_dir; lab.scalar / series / table / progress / log to report;
    lab.sync() waits for the device (no-op on CPU), lab.gather(obj) is every rank's
    object on every rank, lab.barrier() waits for every rank (both over gloo)."""

    def __init__(self, ctx: Context, local_rank: int = 0) -> None:
        self._ctx = ctx
        self.rank, self.world_size, self.local_rank = ctx.rank, ctx.world, local_rank
        self.device, self.backend, self.out_dir = ctx.device, ctx.backend, ctx.out_dir
        self.scalars: dict[str, float | None] = {}
        self.series_points: dict[str, list[list[float | None]]] = {}
        self.tables: dict[str, dict[str, list]] = {}

    @property
    def is_cuda(self) -> bool:
        return self._ctx.is_cuda

    def _name(self, name: str, held: dict) -> bool:
        """Whether to keep this report: rank 0's, a good name, room for it."""
        if not isinstance(name, str) or not NAME_RE.match(name):
            raise ValueError(f"a reported name is lowercase letters, digits and _: {name!r}")
        return self.rank == 0 and (name in held or len(held) < MAX_NAMES)

    def scalar(self, name: str, value: Any) -> None:
        """One number (the last report of a name wins)."""
        if self._name(name, self.scalars):
            self.scalars[name] = _number(value)

    def series(self, name: str, step: int, value: Any) -> None:
        """One point of a series over steps: drawn as a line on the card."""
        if self._name(name, self.series_points):
            points = self.series_points.setdefault(name, [])
            if len(points) < MAX_POINTS:
                points.append([int(step), _number(value)])

    def table(self, name: str, columns: list[str], rows: list[list[Any]]) -> None:
        """A table: column names and rows of numbers or strings (replaces an earlier one
        of that name)."""
        if not self._name(name, self.tables):
            return
        columns = [str(c)[:60] for c in columns][:20]
        kept = [[_cell(v) for v in list(row)[:len(columns)]] for row in list(rows)[:MAX_ROWS]]
        self.tables[name] = {"columns": columns, "rows": kept}

    def progress(self, step: int, total: int, **fields: Any) -> None:
        """The run page's progress bar (and fields such as loss=…, tokens_per_s=…)."""
        self._ctx.progress(step, total, **fields)

    def log(self, message: str) -> None:
        """A line of the run's log (rank 0's)."""
        self._ctx.log(message)

    def sync(self) -> None:
        self._ctx.sync()

    def gather(self, obj: Any) -> list[Any]:
        return self._ctx.gather(obj)

    def barrier(self) -> None:
        self._ctx.barrier()

    def reported(self) -> dict[str, Any]:
        return {"scalars": self.scalars, "series": self.series_points, "tables": self.tables}


def load(path: Any, name: str) -> Any:
    """The owner's file as a module (its top level runs here, in the rank)."""
    spec = importlib.util.spec_from_file_location(f"commonplace_own_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(ctx: Context, name: str, params: dict, local_rank: int = 0) -> dict[str, Any]:
    """Run own experiment `name` on this rank; rank 0's result body."""
    declared, path = own.find(name)
    lab = Lab(ctx, local_rank)
    ctx.log(f"own experiment {name} from {path}")
    load(path, name).run(lab, params)
    return {"title": declared["title"], "own": True, "reports": declared["reports"],
            "reported": lab.reported()}
