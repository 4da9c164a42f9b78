"""When an evaluation curve first reaches the target.

Two answers are recorded for every trial:

* ``first``: the fresh-example count at the first evaluation at or beyond the target.
  It can only take values on the evaluation grid, so it overstates the true crossing
  by up to one evaluation interval.
* ``interpolated``: linear interpolation in fresh examples between the evaluation just
  before ``first`` (which is below the target by definition) and ``first``. It removes
  the grid bias when the metric moves roughly linearly between two evaluations.

The report uses ``interpolated``; ``first`` is kept in every record and in the tables.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Crossing:
    """The first crossing of a target.

    Attributes:
        index: position of the first evaluation at or beyond the target in the curve.
        first: fresh examples at that evaluation.
        interpolated: fresh examples where the straight line between the previous
            evaluation and that one meets the target; equal to ``first`` when the
            curve starts at or beyond the target.
    """

    index: int
    first: float
    interpolated: float


def find_crossing(
    fresh: Sequence[float],
    values: Sequence[float],
    target: float,
    *,
    higher_is_better: bool,
) -> Crossing | None:
    """The first evaluation at or beyond ``target``, with the interpolated crossing.

    Args:
        fresh: fresh examples at each evaluation, non-decreasing.
        values: the metric at each evaluation (NaN never counts as reaching).
        target: the value to reach.
        higher_is_better: True for accuracy (reach means ``>=``), False for a loss
            (reach means ``<=``).

    Returns:
        The crossing, or None when no evaluation reaches the target.

    Raises:
        ValueError: the sequences differ in length.

    Example:
        >>> c = find_crossing([0, 100, 200], [0.5, 0.8, 0.95], 0.9, higher_is_better=True)
        >>> c.index, c.first, round(c.interpolated, 6)
        (2, 200, 166.666667)
    """
    if len(fresh) != len(values):
        raise ValueError(
            f"find_crossing: fresh and values must have the same length, got {len(fresh)} "
            f"and {len(values)}; pass one entry per evaluation"
        )
    sign = 1.0 if higher_is_better else -1.0
    for i, value in enumerate(values):
        if not sign * value >= sign * target:  # also false for NaN
            continue
        if i == 0:
            return Crossing(0, fresh[0], fresh[0])
        x0, x1 = fresh[i - 1], fresh[i]
        y0, y1 = values[i - 1], value
        if y1 == y0 or y0 != y0:  # flat, or a NaN before: nothing to interpolate
            return Crossing(i, x1, x1)
        return Crossing(i, x1, x0 + (target - y0) / (y1 - y0) * (x1 - x0))
    return None
