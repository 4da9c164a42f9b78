"""The adaptive echo decision, pure: no threads, no sleeps, no clock of its own.

Whenever the consumer wants data: take the fresh items that are ready, fill the
shortfall with echoes of recent items while their budget lasts, and wait only when
neither suffices. The realised factor thus tracks ``R = t_upstream / t_downstream``,
capped by ``max_factor``, and is exactly 1 when ``R <= 1``. Timing enters only through
a :class:`Feed`, so :class:`SimulatedFeed` replays the decisions deterministically.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

import numpy as np

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class Feed(Protocol[T_co]):
    """Fresh items produced ahead of the consumer (a thread, or a simulation)."""

    def ready(self) -> int:
        """Items that ``get`` returns without waiting."""
        ...

    def finished(self) -> bool:
        """True once nothing will follow the ready items (upstream over or closed)."""
        ...

    def wait(self) -> None:
        """Waits until an item is ready or none will follow, taking nothing.

        Raises TimeoutError where ``get`` would: a hung upstream.
        """
        ...

    def get(self) -> T_co:
        """The next item, waiting if needed; StopIteration at the end."""
        ...

    def close(self) -> None: ...


class Agreement(Protocol):
    """Combines one vote across DDP ranks: min ready, min capacity, any ended.

    A rank has ``ended`` when it has no fresh item ready and none will come.
    """

    def __call__(self, ready: int, capacity: int, ended: bool) -> tuple[int, int, bool]: ...


def alone(ready: int, capacity: int, ended: bool) -> tuple[int, int, bool]:
    """The agreement of a single process: its own vote.

    Example:
        >>> alone(3, 1, False)
        (3, 1, False)
    """
    return ready, capacity, ended


@dataclass(frozen=True)
class Plan:
    """What to do for the items a step still lacks.

    Attributes:
        fresh: ready fresh items to take now (taking them never waits).
        echoes: echoes to emit after them.
        block: wait until one more fresh item is ready (or none will come), taking
            nothing, then plan again: every take is agreed between ranks.
        stop: the upstream is over; the step ends with what it has.
    """

    fresh: int
    echoes: int = 0
    block: bool = False
    stop: bool = False


def plan(need: int, ready: int, capacity: int, ended: bool) -> Plan:
    """Decides how to fill ``need`` items given an (agreed) vote.

    Fresh items first; echoes only to avoid waiting, and none with a partial budget
    (one more fresh item is awaited instead, after which the shortfall may fit). Once
    a rank has ``ended`` (nothing ready, nothing coming) the step stops with what it
    has: no rank can supply another fresh item in step with the others.

    Example:
        >>> plan(4, ready=1, capacity=3, ended=False)
        Plan(fresh=1, echoes=3, block=False, stop=False)
        >>> plan(4, ready=1, capacity=2, ended=False)
        Plan(fresh=1, echoes=0, block=True, stop=False)
    """
    fresh = min(ready, need)
    rest = need - fresh
    if rest == 0:
        return Plan(fresh)
    if ended:
        return Plan(fresh, stop=True)
    if capacity >= rest:
        return Plan(fresh, echoes=rest)
    return Plan(fresh, block=True)


@dataclass
class _Entry(Generic[T]):
    item: T
    index: int  # the item's fresh index: keys its copies' augmentation
    uses: int


class EchoBuffer(Generic[T]):
    """Recent fresh items with their use counts; an item leaves after ``max_uses``.

    Use 0 is the fresh emission, so an item is echoed at most ``max_uses - 1`` times.
    The oldest item is evicted when a new one arrives at a full buffer.

    Example:
        >>> buf = EchoBuffer(size=2, max_uses=2)
        >>> buf.add("a", 0); buf.add("b", 1); buf.add("c", 2)
        >>> buf.capacity, buf.draw(1)
        (2, [('c', 2, 1)])
        >>> buf.capacity
        1
    """

    def __init__(self, size: int, max_uses: int) -> None:
        self.size, self.max_uses = size, max_uses
        self._entries: deque[_Entry[T]] = deque()

    @property
    def capacity(self) -> int:
        """Distinct items that can still be echoed."""
        return len(self._entries)

    def add(self, item: T, index: int) -> None:
        """Records a fresh item (its first use) under its fresh index."""
        if self.max_uses > 1:
            if len(self._entries) >= self.size:
                self._entries.popleft()
            self._entries.append(_Entry(item, index, 1))

    def draw(self, n: int, rng: np.random.Generator | None = None) -> list[tuple[T, int, int]]:
        """``n`` distinct items as ``(item, fresh_index, use)``: newest, or random with rng."""
        size = len(self._entries)
        if rng is None or n >= size:
            picks = list(range(max(size - n, 0), size))
        elif n == 1:  # the usual case (a batch per step): a fifth of choice()'s cost
            picks = [int(rng.integers(size))]
        else:
            picks = sorted(rng.choice(size, size=n, replace=False).tolist())
        out = []
        for i in picks:
            entry = self._entries[i]
            out.append((entry.item, entry.index, entry.uses))
            entry.uses += 1
        if any(self._entries[i].uses >= self.max_uses for i in picks):
            self._entries = deque(e for e in self._entries if e.uses < self.max_uses)
        return out

    def clear(self) -> None:
        self._entries.clear()


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

    It models the prefetch thread exactly, without one: a producer that starts item
    ``k`` when item ``k - 1`` is done and the queue of ``depth`` has room, so item
    ``k`` is ready at ``finish(k) = max(finish(k-1), taken(k-depth)) + period(k)``.
    Waiting in :meth:`get` or :meth:`wait` moves the shared clock forward to that time.

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

    def _start(self) -> float | None:
        k = self._produced
        if k >= self._depth and k - self._depth >= len(self._taken):
            return None  # queue full: the producer waits for the consumer
        room = self._taken[k - self._depth] if k >= self._depth else 0.0
        return max(self._last, room)

    def _advance(self) -> float | None:
        """Produces up to now; returns the time of the next event, if any."""
        while not self._ended:
            if self._pending is None:
                start = self._start()
                if start is None or start > self._clock():
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
        while True:
            next_event = self._advance()
            if self._queue or next_event is None:
                return
            self._clock.now = max(self._clock.now, next_event)  # the consumer waits

    def get(self) -> T:
        self.wait()
        if not self._queue:
            raise StopIteration
        self._taken.append(self._clock())
        return self._queue.popleft()

    def close(self) -> None:
        self._queue.clear()
        self._ended = True
