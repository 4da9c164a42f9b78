"""A simulated clock and feed: adaptive decisions replayed at any ``R``, without threads."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class SimClock:
    """A clock that moves only when told: simulated seconds.

    Example:
        >>> clock = SimClock(); clock.advance(1.5); clock()
        1.5
    """

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class SimulatedFeed(Generic[T]):
    """A :class:`Feed` whose producer takes ``period(k)`` simulated seconds per item.

    It models the prefetch thread exactly, without one: item ``k`` is ready at ``finish(k)
    = max(finish(k-1), taken(k-depth)) + period(k)`` (the queue holds ``depth``), and
    waiting in :meth:`get` or :meth:`wait` moves the shared clock forward to that time.

    Example:
        >>> clock = SimClock()
        >>> feed = SimulatedFeed(iter("ab").__next__, period=2.0, clock=clock)
        >>> feed.ready(), feed.get(), clock()
        (0, 'a', 2.0)
    """

    def __init__(self, produce: Callable[[], T], *, period: float | Callable[[int], float],
                 clock: SimClock, depth: int = 2) -> None:
        self._produce, self._clock, self._depth = produce, clock, depth
        self._period = period if callable(period) else (lambda k, p=float(period): p)
        self._queue: deque[T] = deque()
        self._taken: list[float] = []  # when each item left the queue
        self._produced, self._last = 0, 0.0
        self._pending: tuple[T, float] | None = None  # item in production, its finish
        self._ended = False

    def _advance(self) -> float | None:
        """Produces up to now; returns the time of the next event, if any."""
        while not self._ended:
            if self._pending is None:
                k, depth = self._produced, self._depth
                if k >= depth and k - depth >= len(self._taken):
                    return None  # queue full: the producer waits for the consumer
                start = max(self._last, self._taken[k - depth] if k >= depth else 0.0)
                if start > self._clock():
                    return start
                try:
                    item = self._produce()
                except StopIteration:
                    self._ended = True
                    return None
                self._pending = (item, start + self._period(self._produced))
            item, finish = self._pending
            if finish > self._clock():
                return finish
            self._queue.append(item)
            self._pending, self._produced, self._last = None, self._produced + 1, finish
        return None

    def ready(self) -> int:
        self._advance()
        return len(self._queue)

    def finished(self) -> bool:
        self._advance()
        return self._ended

    def wait(self) -> None:
        while (event := self._advance()) is not None and not self._queue:
            self._clock.now = max(self._clock.now, event)  # the consumer waits

    def get(self) -> T:
        self.wait()
        if not self._queue:
            raise StopIteration
        self._taken.append(self._clock())
        return self._queue.popleft()

    def close(self, wait: float = 5.0) -> None:  # no thread: nothing to wait for
        self._queue.clear()
        self._ended = True
