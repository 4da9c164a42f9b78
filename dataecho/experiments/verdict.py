"""The verdict rules: how per-part comparisons of seed spreads become one word.

Verdict rules, applied to medians and min/max ranges over seeds:

* **held**: every part of the claim goes the claimed way and the ranges do not overlap;
* **partly**: the medians go the claimed way but some ranges overlap, or some parts
  (workloads, variants) hold and others do not;
* **not held**: the medians go against the claim and the ranges do not overlap;
* **inconclusive**: medians against the claim with overlapping ranges, or no data.

Ranges only count as disjoint when both sides have at least ``MIN_SEEDS`` seeds: with
fewer, a verdict says at most "partly". A part that was not measured (a workload
without a baseline, an echoing kind without a buffer sweep) counts as no data, so the
verdict is at most "partly". Finding 6 claims the absence of harm, so its parts are
"held" when the echoing median is not worse with ``MIN_SEEDS`` seeds each, and "not
held" only when echoing is worse with disjoint ranges.
"""

from __future__ import annotations

import math

from .analysis import Spread

MIN_SEEDS = 3


def compare(a: Spread, b: Spread) -> tuple[int, bool]:
    """Sign of ``median(a) - median(b)`` and whether the ranges are disjoint.

    Ranges with fewer than ``MIN_SEEDS`` values never count as disjoint.

    Example:
        >>> compare(Spread.of([1.0, 2.0, 2.5]), Spread.of([3.0, 4.0, 5.0]))
        (-1, True)
        >>> compare(Spread.of([1.0]), Spread.of([3.0]))
        (-1, False)
    """
    if a.n == 0 or b.n == 0 or (math.isinf(a.median) and math.isinf(b.median)):
        return 0, False
    sign = (a.median > b.median) - (a.median < b.median)
    enough = min(a.n, b.n) >= MIN_SEEDS
    return sign, enough and (a.max < b.min or a.min > b.max)


def verdict(parts: list[tuple[int, bool]]) -> str:
    """Combines per-part comparisons, each with sign +1 when the claim's way.

    Example:
        >>> verdict([(1, True), (1, True)]), verdict([(1, True), (-1, True)])
        ('held', 'partly')
    """
    if not parts or all(s == 0 for s, _ in parts):
        return "inconclusive"
    if all(s > 0 and clear for s, clear in parts):
        return "held"
    if all(s < 0 and clear for s, clear in parts):
        return "not held"
    if any(s > 0 for s, _ in parts):
        return "partly"
    return "inconclusive"
