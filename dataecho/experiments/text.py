"""Numbers as report text: counts, ratios, spreads, durations and Markdown tables.

The reproduction's report (:mod:`dataecho.experiments.report`), the demo's grid report
(:mod:`dataecho.demo.gridreport`) and both progress logs format through these, so one
number reads the same everywhere.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .analysis import Spread

ALIGN = {"l": "---", "r": "---:"}  # Markdown's separator cell per column alignment


def fmt(x: float) -> str:
    """Compact count: 12,345 -> '12.3k'; inf -> '>budget'.

    Example:
        >>> fmt(12345.0), fmt(math.inf)
        ('12.3k', '>budget')
    """
    if math.isinf(x):
        return ">budget"
    if math.isnan(x):
        return "n/a"
    return f"{x / 1000:.1f}k" if abs(x) >= 1000 else f"{x:.3g}"


def times(x: float) -> str:
    """A ratio as ``0.78x``; ``n/a`` when undefined (a missed or missing median).

    Example:
        >>> times(0.781), times(math.nan), times(math.inf)
        ('0.78x', 'n/a', 'n/a')
    """
    return f"{x:.2f}x" if math.isfinite(x) and x > 0 else "n/a"


def ratio_text(x: float) -> str:
    """A same-seed ratio with two decimals; ``inf`` where the echo search missed.

    Example:
        >>> ratio_text(1.256), ratio_text(math.inf)
        ('1.26', 'inf')
    """
    return "inf" if math.isinf(x) else f"{x:.2f}"


def metric_text(x: float) -> str:
    """A validation metric with four decimals.

    Example:
        >>> metric_text(0.91234)
        '0.9123'
    """
    return f"{x:.4f}"


def spread_text(s: Spread, f: Callable[[float], str] = fmt) -> str:
    """``median [min, max] (n=3)``, with how many searches reached the target.

    Example:
        >>> from dataecho.experiments.analysis import Spread
        >>> spread_text(Spread.of([1500.0, 1200.0, math.inf]))
        '1.5k [1.2k, >budget] (n=3, 1 missed)'
    """
    if s.n == 0:
        return "no data"
    missed = f", {s.n - s.finite} missed" if s.finite < s.n else ""
    return f"{f(s.median)} [{f(s.min)}, {f(s.max)}] (n={s.n}{missed})"


def hms(seconds: float) -> str:
    """A duration as ``H:MM:SS`` (seconds dropped, not rounded): elapsed times and ETAs.

    Example:
        >>> hms(3725.9), hms(59.0)
        ('1:02:05', '0:00:59')
    """
    whole = int(seconds)
    return f"{whole // 3600}:{whole // 60 % 60:02d}:{whole % 60:02d}"


def md_table(header: Sequence[str], rows: Iterable[Sequence[str]], align: str) -> list[str]:
    """The lines of a Markdown table; ``align`` has one ``l`` or ``r`` per column.

    Example:
        >>> print("\\n".join(md_table(["name", "n"], [["a", "1"], ["b", ""]], "lr")))
        | name | n |
        |---|---:|
        | a | 1 |
        | b | |
    """
    if len(align) != len(header) or set(align) - set(ALIGN):
        raise ValueError(f"align must have one 'l' or 'r' per column ({len(header)} "
                         f"columns), got {align!r}; pass e.g. {'l' * len(header)!r}")
    return [_row(header), "|" + "|".join(ALIGN[a] for a in align) + "|",
            *(_row(row) for row in rows)]


def _row(cells: Sequence[str]) -> str:
    # An empty cell is one space wide ("| |"), the way hand-written tables write it.
    return "|" + "|".join(f" {cell} " if cell else " " for cell in cells) + "|"
