"""Stall accounting of an adaptive stage: ``time inside next() / wall time``, as its
``timing()`` reports it (the stall fraction :class:`~dataecho.profiler.Monitor` measures
around any loader)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..stats import EchoStats


@dataclass(frozen=True)
class AdaptiveStats:
    """Echo counts of an adaptive stage plus the time its consumer spent blocked.

    Example:
        >>> s = AdaptiveStats(EchoStats(10, 20, 10, 20, None), 20, blocked_s=0.5, wall_s=10.0)
        >>> s.stall_fraction, s.echo.realised_factor
        (0.05, 2.0)
    """

    echo: EchoStats
    steps: int  # items (or batches) emitted
    blocked_s: float  # seconds inside next(): waiting, echo bookkeeping, augmentation
    wall_s: float  # seconds from the first next() to now, or to the end of the data

    @property
    def stall_fraction(self) -> float:
        """Share of wall time the consumer was blocked waiting for data; NaN at first."""
        return self.blocked_s / self.wall_s if self.wall_s > 0 else math.nan

    def as_dict(self) -> dict[str, Any]:
        """Every number, for logs and JSON."""
        return {**self.echo.as_dict(), "steps": self.steps, "blocked_s": self.blocked_s,
                "wall_s": self.wall_s, "stall_fraction": self.stall_fraction}

    def __str__(self) -> str:
        return (f"{self.echo}, {self.steps:,} steps, stall {self.stall_fraction:.1%} "
                f"({self.blocked_s:.2f} s blocked of {self.wall_s:.2f} s)")
