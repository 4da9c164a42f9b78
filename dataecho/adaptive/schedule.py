"""The scheduler: every decision of an adaptive stage, from a feed, a buffer and picks."""

from __future__ import annotations

from contextlib import suppress
from typing import Any

from .._rng import Picks
from .buffer import EchoBuffer
from .plan import Agreement, Feed, plan

Copy = tuple[Any, int, int, int]  # (value, fresh index, use: 0 = fresh, size in examples)


class Scheduler:
    """Decides each step of an adaptive stage by :func:`~dataecho.adaptive.plan.plan`.

    :meth:`step` fills a step with fresh items and echoes; :meth:`ahead` takes its
    answers for the next steps at once, for a lane to emit while nothing fresh arrives.
    It keeps the counts a checkpoint saves.

    Args:
        buffer: the recent fresh items, as ``(value, size in examples)``.
        picks: the draws among them.
        agree: the cross-rank agreement; ``alone`` in one process.
        min_fresh: fresh items after a (re)start before the first echo.
    """

    def __init__(self, buffer: EchoBuffer[tuple[Any, int]], picks: Picks, agree: Agreement,
                 min_fresh: int) -> None:
        self.buffer, self.picks, self.agree, self.min_fresh = buffer, picks, agree, min_fresh
        self.feed: Feed[Any] = None  # type: ignore[assignment]  # set when a pass begins
        self.resume: dict[str, Any] | None = None  # upstream state after the last fresh take
        self.restart(0, 0, 0, 0, 0)

    def restart(self, fresh: int, fresh_ex: int, emitted: int, emitted_ex: int,
                steps: int) -> None:
        """Sets the counts (items, examples) and begins a pass: an empty buffer, no lane."""
        self.fresh, self.fresh_ex, self.steps = fresh, fresh_ex, steps
        self.emitted, self.emitted_ex = emitted, emitted_ex
        self.warm = 0  # fresh items since the pass began
        self.lane: list[Any] | None = None  # the echoes taken ahead, last first
        self._sizes, self._marks = [0], [0]  # after each step ahead: examples, buffer log
        self.buffer.clear()

    def step(self, need: int) -> list[Copy]:
        """Fresh items and echoes for one step, as agreed with the other ranks.

        Every take follows a vote, so all ranks take the same items in the same rounds.
        On "block" a rank waits until it has an item or knows none will come, then votes
        again: the step stops everywhere if any rank's upstream ended during the wait
        (taking the item at once let the other ranks finish a step this one could not,
        pairing their later all-reduces with the wrong steps).
        """
        feed, buffer, out = self.feed, self.buffer, []
        if buffer.gap:
            buffer.release(self.steps)
        taken = awaited = 0  # fresh items in out; 1 after a wait: that item comes next
        while need:
            held = len(buffer.entries) if self.warm + taken + awaited >= self.min_fresh else 0
            ready, finished = feed.ready(), False
            if ready < need:  # then the end matters: finished() first (no item can
                finished = feed.finished()  # follow a True), then ready() again
                ready = feed.ready()
            vote = self.agree(ready if ready < need else need,  # min(), without a call
                              held if held < need else need, finished and not ready)
            fresh, echoes, block, stop = plan(need, *vote)
            for _ in range(fresh):  # ready: no wait
                value, self.resume, size = feed.get()
                out.append((value, self.fresh, 0, size))
                self.fresh, self.fresh_ex = self.fresh + 1, self.fresh_ex + size
            taken, need, awaited = taken + fresh, need - fresh, 0
            if block:
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

    def echo(self, step: int) -> Copy:
        """An echo of one item at ``step``: the ``(seed, step)``-keyed pick among those held."""
        held = len(self.buffer.entries)
        (value, size), index, use = self.buffer.take(
            self.picks.below(step, held) if held > 1 else 0, step)
        return value, index, use, size

    def emit(self, copies: list[Copy]) -> None:
        """Counts a step of ``copies`` as emitted."""
        self.steps += 1
        self.emitted += len(copies)
        self.emitted_ex += copies[0][3] if len(copies) == 1 else sum(c[3] for c in copies)

    def ahead(self, horizon: int) -> list[Any] | None:
        """What :meth:`step` emits at the next ``horizon`` steps of one item, none fresh.

        For one process in a warm pass. Taken now, under a buffer record: :meth:`settle`
        keeps the steps emitted and undoes the rest, as if each was decided on its own.
        Returns :attr:`lane`, the values last first, to pop until a mark (the list
        appended to itself) ends it; None: nothing to echo.
        """
        buffer, echo = self.buffer, self.echo
        if not (buffer.entries or buffer.cooling):
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
            self.buffer.rollback(self._marks[self._done()])
            self.steps, self.emitted, self.emitted_ex = self.counts()
            self.lane.clear()
            self.lane = None

    def counts(self) -> tuple[int, int, int]:
        """(steps, emitted items, emitted examples), the lane's popped echoes included."""
        done = self._done()
        return self.steps + done, self.emitted + done, self.emitted_ex + self._sizes[done]

    def _done(self) -> int:
        lane = self.lane
        if lane is None:
            return 0
        left = len(lane)  # the mark is only ever appended: an index below it is an echo
        return len(self._marks) - 1 - (left - 1 if left and lane[left - 1] is lane else left)
