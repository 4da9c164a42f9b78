"""Stall accounting around any loader: the share of a loop's time spent waiting for data.

The stall fraction is the quantity PyTorch, Lightning, Ray and TensorFlow profilers
report as time in the data loader: ``time inside next() / wall time``.
:class:`Monitor` measures it around any loader inside a training loop and logs it
periodically.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

from .._checks import check_iterable, check_positive_int
from .sync import Sync, resolve

T = TypeVar("T")


@dataclass(frozen=True)
class LoopTiming:
    """Where a training loop's time went: blocked in ``next()`` or in the step.

    Example:
        >>> t = LoopTiming(steps=10, blocked_s=3.0, step_s=1.0)
        >>> t.stall_fraction, t.ratio
        (0.75, 4.0)
    """

    steps: int
    blocked_s: float  # total seconds inside next()
    step_s: float  # total seconds between a next() returning and the following call

    @property
    def stall_fraction(self) -> float:
        """Blocked share of the loop's time; NaN before the first step."""
        total = self.blocked_s + self.step_s
        return self.blocked_s / total if total > 0 else math.nan

    @property
    def ratio(self) -> float:
        """Estimated ``R``: step period over step time.

        Exact for a loader that reads ahead in parallel (DataLoader workers, a
        prefetch thread): then the time per step is ``max(t_up, t_down)``. A loader
        that reads inside the loop has ``R = blocked / step`` instead, one less.
        """
        return (self.blocked_s + self.step_s) / self.step_s if self.step_s > 0 else math.nan

    def __str__(self) -> str:
        n = max(self.steps, 1)
        return (f"{self.steps:,} steps: data {1e3 * self.blocked_s / n:.1f} ms/step, "
                f"compute {1e3 * self.step_s / n:.1f} ms/step, stall "
                f"{self.stall_fraction:.1%}, R ~ {self.ratio:.2f}")


class Monitor(Generic[T]):
    """Wraps a loader inside a training loop and logs its stall every ``every`` steps.

    Time inside ``next()`` counts as blocked; time from one ``next()`` returning until
    the accelerator has finished the step (``sync``, called at the following
    ``next()``) counts as the step. Without the wait, a CUDA step would count only its
    launch and its work would land in the next wait for data. Iterating it again
    starts a new pass over the loader (a new epoch); totals accumulate. Leaving a
    ``with`` block logs a final line.

    Args:
        loader: any iterable (DataLoader, dataecho stage, Ray iterator).
        every: steps between log lines, an int >= 1.
        log: receives each line; default ``print``.
        clock: seconds counter; default ``time.perf_counter``.
        sync: waits for the accelerator before each ``next()``: ``"auto"`` (default)
            the device in use (``torch.cuda.synchronize`` once CUDA is initialised, MPS's
            or XLA's), a callable as is, ``None`` never (a CPU step; or to keep the
            device's work overlapping the next read, reading step times as launch
            times).

    Example:
        >>> lines = []
        >>> with Monitor(range(4), every=2, log=lines.append) as loader:
        ...     total = sum(loader)
        >>> total, len(lines), lines[0].startswith("dataecho: 2 steps")
        (6, 3, True)
    """

    def __init__(self, loader: Iterable[T], *, every: int = 100,
                 log: Callable[[str], object] = print,
                 clock: Callable[[], float] = time.perf_counter,
                 sync: Sync = "auto") -> None:
        self.loader = check_iterable(loader, "loader")
        self.every = check_positive_int(every, "every")
        self.log, self.clock, self.sync = log, clock, resolve(sync)
        self._it: Iterator[T] | None = None
        self._steps, self._blocked, self._step = 0, 0.0, 0.0
        self._returned: float | None = None  # when next() last returned

    def __iter__(self) -> Monitor[T]:
        self._it, self._returned = iter(self.loader), None
        return self

    def __next__(self) -> T:
        if self._it is None:
            self.__iter__()
        if self._returned is not None:
            self.sync()  # the step ends when the device has done its work
        start = self.clock()
        if self._returned is not None:
            self._step += start - self._returned
        try:
            item = next(self._it)  # type: ignore[arg-type]
        except StopIteration:
            self._blocked += self.clock() - start
            self._returned = None  # the loop is over: what follows is no step
            raise
        self._returned = self.clock()
        self._blocked += self._returned - start
        self._steps += 1
        if self._steps % self.every == 0:
            self.log(f"dataecho: {self.timing()}")
        return item

    def timing(self) -> LoopTiming:
        """The totals so far."""
        return LoopTiming(self._steps, self._blocked, self._step)

    def __enter__(self) -> Monitor[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._returned is not None:
            self.sync()
            self._step += self.clock() - self._returned  # the last step
            self._returned = None
        self.log(f"dataecho: total {self.timing()}")
