"""The ideal pipeline schedule: the slots GPipe or 1F1B would give each stage if every
forward took t_f, every backward t_b and messages took no time.

Each stage runs its textbook order (the same orders the lab checks its hand-written
schedules against, jobs/lab/strategies/pipeline_parallel.py):

    GPipe   F0 … F(m−1), then B0 … B(m−1)
    1F1B    min(p−s−1, m) warm-up forwards, then one forward and one backward, then the
            backwards still owed
    naive   one batch, no micro-batches: GPipe with m = 1

and an operation starts once its stage is free and its input exists: F(s, i) after
F(s−1, i), B(s, i) after B(s+1, i). The step then takes (m+p−1)(t_f+t_b) and the idle
fraction of every stage is the formula's (p−1)/(m+p−1).
"""

from __future__ import annotations

from dataclasses import dataclass

from jobs.lab.predict.cost import bubble_fraction

# The lab's strategy names → the order their stages follow.
ORDERS = {"gpipe": "gpipe", "torch_gpipe": "gpipe", "naive_mp": "gpipe",
          "1f1b": "1f1b", "torch_1f1b": "1f1b"}
ORDER_NAMES = {"gpipe": "GPipe", "1f1b": "1F1B"}
MAX_SLOTS = 4096  # stages × micro-batches worth simulating


@dataclass(frozen=True)
class Slot:
    stage: int
    kind: str  # "forward" or "backward"
    mb: int
    t0: float  # seconds from the schedule's start
    t1: float


@dataclass(frozen=True)
class Ideal:
    order: str  # "gpipe" or "1f1b"
    p: int
    m: int
    t_f: float
    t_b: float
    slots: tuple[Slot, ...]

    @property
    def span(self) -> float:
        return max((s.t1 for s in self.slots), default=0.0)

    @property
    def formula(self) -> float:
        return bubble_fraction(self.p, self.m)

    @property
    def name(self) -> str:
        return ORDER_NAMES[self.order]


def stage_order(order: str, p: int, m: int, s: int) -> list[tuple[str, int]]:
    if order == "1f1b":
        warmup = min(p - s - 1, m)
        ops = [("forward", i) for i in range(warmup)]
        for k in range(m - warmup):
            ops += [("forward", warmup + k), ("backward", k)]
        return ops + [("backward", i) for i in range(m - warmup, m)]
    return [("forward", i) for i in range(m)] + [("backward", i) for i in range(m)]


def simulate(order: str, p: int, m: int, t_f: float, t_b: float) -> Ideal | None:
    """Every stage's slots, each operation as early as its stage and its input allow;
    None for sizes not worth drawing or an order that cannot finish."""
    if order not in ORDER_NAMES or p < 1 or m < 1 or p * m > MAX_SLOTS:
        return None
    todo = [stage_order(order, p, m, s) for s in range(p)]
    done: dict[tuple[str, int, int], float] = {}  # (kind, stage, mb) → end
    free, nxt, slots = [0.0] * p, [0] * p, []
    progress = True
    while progress:
        progress = False
        for s in range(p):
            while nxt[s] < len(todo[s]):
                kind, mb = todo[s][nxt[s]]
                need = (("forward", s - 1, mb) if kind == "forward" and s > 0 else
                        ("backward", s + 1, mb) if kind == "backward" and s < p - 1 else None)
                if need is not None and need not in done:
                    break
                start = max(free[s], done.get(need, 0.0) if need else 0.0)
                end = start + (t_f if kind == "forward" else t_b)
                done[(kind, s, mb)] = free[s] = end
                slots.append(Slot(s, kind, mb, start, end))
                nxt[s] += 1
                progress = True
    if any(nxt[s] < len(todo[s]) for s in range(p)):
        return None
    return Ideal(order, p, m, t_f, t_b, tuple(slots))
