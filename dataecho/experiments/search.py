"""Quasi-random hyperparameter search: a shifted Halton sequence over log scales.

The paper tunes every condition independently by quasi-random search and keeps the
best trial. Here each (condition, seed) search takes the first ``n`` points of the 2-D
Halton sequence (bases 2 and 3), rotated by a shift drawn from the seed (a
Cranley-Patterson rotation), so repeats of a search probe different points while each
still covers the square evenly. The points map to log learning rate and
log(1 - momentum).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

_BASES = (2, 3)


@dataclass(frozen=True)
class HParams:
    """One trial's optimizer settings (SGD with Nesterov momentum).

    Example:
        >>> HParams(lr=0.1, one_minus_momentum=0.1).momentum
        0.9
    """

    lr: float  # peak learning rate
    one_minus_momentum: float  # 1 - Nesterov momentum, searched on a log scale

    @property
    def momentum(self) -> float:
        """The momentum coefficient."""
        return round(1.0 - self.one_minus_momentum, 12)

    def as_dict(self) -> dict[str, Any]:
        """The fields, for records and keys."""
        return asdict(self)


def radical_inverse(index: int, base: int) -> float:
    """The van der Corput radical inverse of ``index`` in ``base``.

    Example:
        >>> [radical_inverse(i, 2) for i in range(1, 5)]
        [0.5, 0.25, 0.75, 0.125]
    """
    result, scale = 0.0, 1.0 / base
    while index:
        index, digit = divmod(index, base)
        result += digit * scale
        scale /= base
    return result


def halton(n: int, dims: int = 2) -> np.ndarray:
    """The Halton points 1..n (index 0, the corner, is skipped) in ``[0, 1)^dims``.

    Example:
        >>> halton(2).tolist()
        [[0.5, 0.3333333333333333], [0.25, 0.6666666666666666]]
    """
    if dims > len(_BASES):
        raise ValueError(f"halton: dims must be <= {len(_BASES)}, got {dims}")
    return np.array([[radical_inverse(i, b) for b in _BASES[:dims]] for i in range(1, n + 1)])


def search_points(
    n: int,
    seed: int,
    lr_range: tuple[float, float],
    one_minus_momentum_range: tuple[float, float],
) -> list[HParams]:
    """The ``n`` trials of the search repeat ``seed``, log-uniform over both ranges.

    Values are rounded to 4 significant digits so records and keys stay readable.

    Example:
        >>> points = search_points(8, 0, (0.01, 1.0), (0.01, 0.3))
        >>> len(points), all(0.01 <= p.lr <= 1.0 for p in points)
        (8, True)
    """
    shift = np.random.default_rng((seed, 0x5EA2C4)).random(2)
    unit = (halton(n) + shift) % 1.0
    out = []
    for u_lr, u_mom in unit:
        out.append(HParams(lr=_log_scale(u_lr, lr_range),
                           one_minus_momentum=_log_scale(u_mom, one_minus_momentum_range)))
    return out


def _log_scale(u: float, bounds: tuple[float, float]) -> float:
    lo, hi = math.log(bounds[0]), math.log(bounds[1])
    return float(f"{math.exp(lo + u * (hi - lo)):.4g}")
