"""Time on both sides of the echo point: the read an echo saves, the augmentation it repeats.

Echoing before augmentation makes a reader spend ``t_read / e + t_augment`` per example
it hands out, not ``(t_read + t_augment) / e``: the augmentation runs for every copy.
A prediction of the gain needs both, measured where the data is read. :class:`Timing`
holds two :class:`Clock` s, and :func:`dataecho.pipeline` (given ``timing=``) wraps its
read stage and its augmentation in :class:`Timed` stages that feed them. A stage times
one call in :data:`EVERY` while its calls are cheap, so the cost per item is one counter
test, and every call once they take :data:`EVERY_CALL_NS` or more, where the two clock
reads are under 1% of the call; a clock reports the mean of the timed calls. The stages
are transparent to checkpoints (their state is their upstream's).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, MutableSequence
from dataclasses import dataclass
from typing import Any, TypeVar

from .stage import Stage, State

T = TypeVar("T")

#: One call in this many is timed while calls are cheap (a prime, so a regular pattern
#: of fresh reads and copies, every e-th call, is not sampled on one side only).
EVERY = 31

#: Calls that take this many nanoseconds or more on average are all timed. A read from
#: a stream costs little most of the time and waits for the network now and then (once
#: in ~20 reads in the demo); one call in 31 catches so few of the waits that a mean
#: over a few hundred batches was off by a quarter. Timing every such call costs under 1%.
EVERY_CALL_NS = 50_000


#: Places a clock takes in its store: calls, calls timed, their nanoseconds.
SIZE = 3


class Clock:
    """Sampled time of one side: calls, calls timed, and the timed calls' nanoseconds.

    Its time per call is the mean over the timed calls, which a read that waits now and
    then (for the next shard of a stream) needs: most reads are quick, a few are long,
    and the mean is what they cost together.

    Args:
        store: where its :data:`SIZE` numbers live (from ``at``): a list, or shared
            memory that other processes read; default a list of its own.
        at: the first of its places in ``store``.

    Example:
        >>> clock = Clock()
        >>> for ns in (1000, 2000, 6000): clock.add(ns, calls=31)
        >>> clock.totals(), clock.seconds_per_call()
        ((93, 3, 9000), 3e-06)
    """

    def __init__(self, store: MutableSequence[int] | None = None, at: int = 0) -> None:
        self.store, self.at = ([0] * SIZE if store is None else store), at

    def add(self, ns: int, *, calls: int) -> None:
        """Records one timed call of ``ns`` nanoseconds, standing for ``calls`` calls."""
        store, at = self.store, self.at
        store[at] += calls
        store[at + 1] += 1
        store[at + 2] += ns

    def totals(self) -> tuple[int, int, int]:
        """(calls, calls timed, nanoseconds of the timed calls)."""
        return self.store[self.at], self.store[self.at + 1], self.store[self.at + 2]

    def seconds_per_call(self) -> float | None:
        """The mean time of one call, or None before one was timed."""
        _, timed, ns = self.totals()
        return ns / timed / 1e9 if timed else None


class Timed(Stage[T]):
    """Passes its upstream's items through, timing its calls on ``clock``.

    One call in :data:`EVERY` while the clock's mean is under :data:`EVERY_CALL_NS`,
    every call from the first sample that says more (and back when it falls under).
    With ``inner``, a ``Timed`` stage further up (the read, under an augmentation), a
    timed call counts only its own time: the inner stage times whatever it does during
    that call, and that is taken off. Transparent: its state, snapshot, counts and
    copies are its upstream's.

    Example:
        >>> from dataecho import Source
        >>> clock = Clock()
        >>> stage = Timed(Source(list(range(62)), shuffle=False), clock)
        >>> len(list(stage)), clock.totals()[:2]
        (62, (62, 2))
    """

    def __init__(self, upstream: Stage[T], clock: Clock, inner: Timed[Any] | None = None) -> None:
        self.upstream: Stage[T] = upstream
        self.clock, self.inner = clock, inner
        self._period = self._left = EVERY  # calls per timed call; calls to the next one
        self._judge = 1  # samples to the next look at the mean (the first: at once)
        self._forced = False  # an outer stage is timing this call: time it too
        self._last = 0  # ns of the calls timed because the outer stage's call was

    def __next__(self) -> T:
        self._left -= 1
        if self._left and not self._forced:
            return next(self.upstream)
        regular, period = not self._left, self._period
        if regular:  # before the call: a StopIteration must not leave the count at 0
            self._left = period
        inner = self.inner
        if inner is not None:
            inner._forced, inner._last = True, 0
        # A garbage collection that falls into a timed call (a worker's first one walks
        # everything it inherited: ~0.1 s) is no cost of this side: it runs after.
        collecting = gc.isenabled()
        gc.disable()
        start = time.perf_counter_ns()
        try:
            item = next(self.upstream)
        finally:
            elapsed = time.perf_counter_ns() - start
            if collecting:
                gc.enable()
            if inner is not None:
                inner._forced = False
        if self._forced:  # one outer call may take several of these (a buffer's fill)
            self._last += elapsed
        if regular or self._forced:
            own = elapsed - (inner._last if inner is not None else 0)
            self.clock.add(max(own, 0), calls=period if regular else 0)
        if regular:
            self._judge -= 1
            if not self._judge:  # the mean is looked at once in EVERY samples: it costs
                self._judge = EVERY
                _, timed, ns = self.clock.totals()
                self._period = 1 if ns >= EVERY_CALL_NS * timed else EVERY
                self._left = self._period
        return item

    def _config(self) -> dict[str, Any]:
        return {}

    def state_dict(self) -> State:
        return self.upstream.state_dict()

    def load_state_dict(self, state: Any) -> None:
        self.upstream.load_state_dict(state)

    def _snapshot(self) -> Any:
        return self.upstream._snapshot()

    def _expand(self, token: Any) -> State:
        return self.upstream._expand(token)

    def _set_state(self, state: Any) -> None:  # never called: load_state_dict delegates
        self.upstream.load_state_dict(state)

    def copies_of(self) -> Callable[[], tuple[int, bool]] | None:
        return self.upstream.copies_of()

    def __repr__(self) -> str:
        return repr(self.upstream)


@dataclass(frozen=True)
class Sides:
    """Seconds per example on each side of the echo point, in one reader.

    Attributes:
        read_s: per fresh example, reading and decoding (what every echo saves for
            copies); None before one was timed.
        augment_s: per augmentation call (what echoing before augmentation repeats
            for every copy, and echoing after it saves); 0.0 without augmentation.
        reads: fresh examples read; ``augments``: augmentation calls (both counted up
            to each reader's last timed call, so in steps of :data:`EVERY`).
    """

    read_s: float | None
    augment_s: float | None
    reads: int
    augments: int


class Timing:
    """The two clocks of one reader's pipeline: the read, and the augmentation.

    Args:
        store: where the clocks keep their numbers (``2 * SIZE`` from ``at``; default a
            list of its own); shared memory lets a training process read its DataLoader
            workers' times.
        at: the first of those places in ``store``.

    Example:
        >>> import dataecho
        >>> timing = Timing()
        >>> stage = dataecho.pipeline(list(range(310)), augment=abs, factor=2,
        ...                           batch_size=None, timing=timing)
        >>> n = sum(1 for _ in stage)
        >>> sides = timing.sides()
        >>> n, sides.reads, sides.augments, sides.read_s > 0, sides.augment_s >= 0
        (620, 310, 620, True, True)
    """

    def __init__(self, store: MutableSequence[int] | None = None, at: int = 0) -> None:
        store = [0] * (2 * SIZE) if store is None else store
        self.read, self.augment = Clock(store, at), Clock(store, at + SIZE)

    def sides(self) -> Sides:
        """The mean time per call of each side (the augmentation's without the read's)."""
        return sides_of([self])


def sides_of(timings: list[Timing]) -> Sides:
    """The sides of several readers' timings: their calls and timed calls added up.

    Example:
        >>> sides_of([Timing(), Timing()])
        Sides(read_s=None, augment_s=0.0, reads=0, augments=0)
    """
    read = Clock([sum(n) for n in zip(*(t.read.totals() for t in timings), strict=True)])
    augment = Clock([sum(n) for n in zip(*(t.augment.totals() for t in timings), strict=True)])
    reads, augments = read.totals()[0], augment.totals()[0]
    return Sides(read.seconds_per_call(), 0.0 if not augments else augment.seconds_per_call(),
                 reads, augments)
