"""Numbers as the journal shows them: 1.23 M, 4.5 ms, 0.98×, 37%, and "–" for what is not
a finite number. The one place they are formatted: the cards, the run pages and the run
list's metrics all print a value the same way."""

from __future__ import annotations

import math


def finite(value) -> float | None:
    """A real, finite number, or None (booleans, strings and NaN are not numbers here)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def si(value, unit: str = "", digits: int = 3) -> str:
    """1234567 → "1.23 M" (+unit); "–" for what is not a finite number."""
    value = finite(value)
    if value is None:
        return "–"
    prefix = ""
    for factor, name in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            value, prefix = value / factor, name
            break
    # never 1e+02: a number that needs more digits than asked gets them
    shown = f"{value:.0f}" if abs(value) >= 10 ** digits else f"{value:.{digits}g}"
    return f"{shown} {prefix}{unit}".strip()


def seconds(value) -> str:
    value = finite(value)
    if value is None:
        return "–"
    if abs(value) >= 1:
        return f"{value:.3g} s"
    if abs(value) >= 1e-3:
        return f"{value * 1e3:.3g} ms"
    return f"{value * 1e6:.3g} µs"


def ratio(value) -> str:
    value = finite(value)
    return "–" if value is None else f"{value:.2f}×"


def percent(value) -> str:
    value = finite(value)
    return "–" if value is None else f"{value:.0%}"
