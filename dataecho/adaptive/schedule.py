"""Every decision of an adaptive stage: :func:`plan`, applied at each step by the Scheduler.

:func:`plan` is pure: no threads, no sleeps, no clock; timing enters through a :class:`Feed`.
"""

from __future__ import annotations

from contextlib import suppress
from functools import lru_cache
from typing import Any, NamedTuple, Protocol, TypeVar

from .._rng import Picks
from .buffer import EchoBuffer

T_co = TypeVar("T_co", covariant=True)
Copy = tuple[Any, int, int, int]  # (value, fresh index, use: 0 = fresh, size in examples)


class Feed(Protocol[T_co]):
    """Fresh items produced ahead of the consumer (a thread, or a simulation).

    ``ready()``: the items ``get()`` returns without waiting; ``finished()``: True once
    none will follow them (upstream over, or closed); ``wait()``: waits until an item is
    ready or none will follow, taking nothing (TimeoutError); ``get()``: the next item,
    waiting if needed (StopIteration at the end); ``close(wait)``: stops, dropping them.
    """

    def ready(self) -> int: ...
    def finished(self) -> bool: ...
    def wait(self) -> None: ...
    def get(self) -> T_co: ...
    def close(self, wait: float = 5.0) -> None: ...


class Agreement(Protocol):
    """Combines one vote across DDP ranks: min ready, min capacity, any ended."""

    def __call__(self, ready: int, capacity: int, ended: bool) -> tuple[int, int, bool]: ...


def alone(ready: int, capacity: int, ended: bool) -> tuple[int, int, bool]:
    """The agreement of a single process: its own vote.

    Example:
        >>> alone(3, 1, False)
        (3, 1, False)
    """
    return ready, capacity, ended


class Plan(NamedTuple):
    """What to do for the items a step still lacks."""

    fresh: int  # ready fresh items to take now (taking them never waits)
    echoes: int = 0  # echoes to emit after them
    block: bool = False  # wait, taking nothing, for one more fresh item or the end; then plan again
    stop: bool = False  # the upstream is over: the step ends with what it has


@lru_cache(maxsize=4096)  # pure, and the few answers a stage needs repeat every step
def plan(need: int, ready: int, capacity: int, ended: bool) -> Plan:
    """Decides how to fill ``need`` items given an (agreed) vote.

    Take the ready fresh items, fill the shortfall with echoes while the budget lasts, and
    wait only when neither suffices: the realised factor tracks ``R = t_upstream /
    t_downstream`` up to ``max_factor``, and is 1 at ``R <= 1``. No echo with a partial
    budget (one more fresh item is awaited instead). Once a rank has ``ended`` (nothing
    ready, nothing to come) the step stops with what it has, on every rank.

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


class Scheduler:
    """Decides each step of an adaptive stage by :func:`plan`.

    :meth:`step` fills a step with fresh items and echoes; :meth:`ahead` takes its answers
    for the next steps at once, for a lane to emit while nothing fresh arrives. It keeps
    the counts a checkpoint saves. Its ``buffer`` holds the recent fresh items as ``(value,
    size in examples)``, ``picks`` draws among them, ``agree`` is the cross-rank agreement
    (``alone`` in one process), ``min_fresh`` the fresh items of a pass before an echo.
    """

    def __init__(self, buffer: EchoBuffer[tuple[Any, int]], picks: Picks, agree: Agreement,
                 min_fresh: int) -> None:
        self.buffer, self.picks, self.agree, self.min_fresh = buffer, picks, agree, min_fresh
        self.solo = agree is alone  # one process: its vote is its own, without a call
        self.feed: Feed[Any] = None  # type: ignore[assignment]  # set when a pass begins
        self.resume: dict[str, Any] | None = None  # upstream state after the last fresh take
        self.restart(0, 0, 0, 0, 0)

    def restart(self, fresh: int, fresh_ex: int, emitted: int, emitted_ex: int, steps: int) -> None:
        """Sets the counts (items, examples) and begins a pass: an empty buffer, no lane."""
        self.fresh, self.fresh_ex, self.steps = fresh, fresh_ex, steps
        self.emitted, self.emitted_ex = emitted, emitted_ex
        self.warm = 0  # fresh items since the pass began
        self.spaced_waits = 0  # waits while the spacing held back items with echoes left
        self.last: Copy = (None, -1, 1, 0)  # the latest copy emitted off a lane; none yet
        self.lane: list[Any] | None = None  # the echoes taken ahead, last first
        self._sizes, self._marks = [0], [0]  # after each step ahead: examples, buffer log
        self.buffer.clear()

    def step(self, need: int) -> list[Copy]:
        """Fresh items and echoes for one step, as agreed with the other ranks.

        Every take follows a vote, so all ranks take the same items in the same rounds. On
        "block" a rank waits until it has an item or none will come, then votes again: the step
        stops everywhere if any rank's upstream ended meanwhile (else other ranks could finish
        a step this one could not, pairing their later all-reduces with the wrong steps).
        """
        feed, buffer, out = self.feed, self.buffer, []
        if buffer.gap:
            buffer.release(self.steps)
        taken = awaited = 0  # fresh items in out; 1 after a wait: that item comes next
        while need:
            held = len(buffer.entries) if self.warm + taken + awaited >= self.min_fresh else 0
            ready, finished = feed.ready(), False
            if ready < need:  # then the end matters: finished() first (no item can follow
                finished = feed.finished()  # a True), then, if it is over, ready() again
                ready = feed.ready() if finished else ready
            r, h = ready if ready < need else need, held if held < need else need  # min()s,
            e = finished and not ready  # without a call; alone() agrees uncalled
            fresh, echoes, block, stop = (plan(need, r, h, e) if self.solo
                                          else plan(need, *self.agree(r, h, e)))
            for _ in range(fresh):  # ready: no wait
                value, self.resume, size = feed.get()
                out.append((value, self.fresh, 0, size))
                self.fresh, self.fresh_ex = self.fresh + 1, self.fresh_ex + size
            taken, need, awaited = taken + fresh, need - fresh, 0
            if block:
                if buffer.cooling:
                    self.spaced_waits += 1
                feed.wait()  # TimeoutError for a hung upstream; its error waits for get()
                awaited = 1
            if echoes == 1:
                out.append(self.echo(self.steps))
            elif echoes:  # the (seed, step)-keyed generator only where there is a choice
                choice = self.picks.at(self.steps) if buffer.capacity > echoes else None
                out += [(v, i, use, size)
                        for (v, size), i, use in buffer.draw(echoes, choice, self.steps)]
            need -= echoes
            if stop:
                if finished and not ready:
                    with suppress(StopIteration):
                        feed.get()  # raises the upstream's error, if that is why it ended
                break
        for value, index, _, size in out[:taken]:
            buffer.add((value, size), index, self.steps)
        self.warm += taken
        return out

    def one(self) -> Any:
        """:meth:`step` of one item, then :meth:`emit`; StopIteration at the end. A ready item in
        one process is plan()'s only answer, taken without step()'s rounds: each step at R <= 1."""
        feed, buffer, fresh = self.feed, self.buffer, self.fresh
        if not (self.solo and feed.ready()):
            if not (copies := self.step(1)):
                raise StopIteration
            self.emit(copies)
            return copies[0][0]
        if buffer.gap:  # first, as in step(): add() may evict an item released now
            buffer.release(self.steps)
        value, self.resume, size = feed.get()
        buffer.add((value, size), fresh, self.steps)
        self.fresh, self.fresh_ex, self.warm = fresh + 1, self.fresh_ex + size, self.warm + 1
        self.last, self.steps = (value, fresh, 0, size), self.steps + 1  # emit()'s counts, inline
        self.emitted, self.emitted_ex = self.emitted + 1, self.emitted_ex + size
        return value

    def echo(self, step: int) -> Copy:
        """An echo of one item at ``step``: the ``(seed, step)``-keyed pick among those held."""
        held = len(self.buffer.entries)
        (value, size), index, use = self.buffer.take(
            self.picks.below(step, held) if held > 1 else 0, step)
        return value, index, use, size

    def emit(self, copies: list[Copy]) -> None:
        """Counts a step of ``copies`` as emitted."""
        self.last, self.steps, self.emitted = copies[0], self.steps + 1, self.emitted + len(copies)
        self.emitted_ex += copies[0][3] if len(copies) == 1 else sum(c[3] for c in copies)

    def ahead(self, horizon: int) -> list[Any] | None:
        """What :meth:`step` emits at the next ``horizon`` steps of one item, none fresh.

        For one process, once the pass is warm. Taken now, under a buffer record: :meth:`settle`
        keeps the steps emitted and undoes the rest, as if each was decided on its own. Returns
        :attr:`lane`, values last first, popped until a mark (the list in itself) ends it.
        """
        buffer, echo = self.buffer, self.echo
        if self.warm < self.min_fresh or not (buffer.entries or buffer.cooling):
            return None
        buffer.record()
        log: list[Any] = buffer.log  # type: ignore[assignment]  # recording
        values: list[Any] = []
        self._sizes, self._marks = sizes, marks = [0], [0]
        for step in range(self.steps, self.steps + horizon):
            if buffer.gap:
                buffer.release(step)
            if not buffer.entries:  # nothing left to echo: that step waits, in step()
                break
            value, _, _, size = echo(step)
            values.append(value)
            sizes.append(sizes[-1] + size)
            marks.append(len(log))
        values.reverse()
        self.lane = values or None
        if not values:
            buffer.rollback(0)
        return self.lane

    def settle(self) -> None:
        """Counts the lane's echoes popped so far, undoes the rest, ends the lane."""
        if self.lane is not None:
            steps, self.emitted, self.emitted_ex = self.counts()
            self.buffer.rollback(self._marks[steps - self.steps])
            self.steps = steps
            self.lane.clear()
            self.lane = None

    def copy_of(self) -> tuple[int, bool]:
        """(fresh number from 1, first copy?) of the one item a step emitted last."""
        done = self.counts()[0] - self.steps  # echoes popped off the lane
        if done:  # the lane's latest step: its take ends the buffer records of that step
            return self.buffer.log[self._marks[done] - 1][1].index + 1, False  # type: ignore[index]
        return self.last[1] + 1, self.last[2] == 0

    def counts(self) -> tuple[int, int, int]:
        """(steps, emitted items, emitted examples), the lane's popped echoes included."""
        lane, done = self.lane, 0
        if lane is not None:  # the mark is only ever appended: an index below it is an echo
            done = len(self._marks) - 1 - len(lane) + (1 if lane and lane[-1] is lane else 0)
        return self.steps + done, self.emitted + done, self.emitted_ex + self._sizes[done]
