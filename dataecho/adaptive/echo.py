"""Adaptive batch echoing: repeat a recent batch only while the fresh one is late."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from contextlib import suppress
from functools import partial
from typing import Any, ClassVar, TypeVar

from .. import _rng
from .._checks import check_callable, check_positive_int, check_seed, check_size, check_timeout
from ..factor import AUTO_BUFFER, DEFAULT_MAX_FACTOR
from ..iterable import as_stage
from ..sizes import default_size
from ..stage import Stage, State
from .buffer import EchoBuffer
from .plan import Agreement, Feed, alone, plan
from .prefetch import Channel, Prefetcher, reader
from .timing import AdaptiveStats

T = TypeVar("T")

_MAX_HORIZON = 64  # steps one plan of the echo lane decides, at most

#: Recent items echoes are drawn from, by default: ``Auto``'s default for whole items
#: (loaders deliver in bursts: ``benchmarks/results/bursts.md``).
DEFAULT_BUFFER = AUTO_BUFFER["items"]

Copy = tuple[Any, int, int, int]  # (value, fresh index, use: 0 = fresh, size in examples)


def _left(planned: list[Any]) -> int:
    """Echoes a lane's plan has left: its length, less the producer's mark at its end."""
    n = len(planned)  # the mark is only ever appended: an index below n is an echo
    return n - 1 if n and planned[n - 1] is planned else n


class AdaptiveEcho(Stage[T]):
    """Yields the next upstream item if it is ready, else an echo of a recent one.

    A background thread reads ``upstream`` into a queue of ``prefetch`` items. On each
    ``next()`` a ready fresh item wins; when none is ready the latest item (or one of
    the ``buffer_size`` latest, picked by a ``(seed, step)``-keyed draw) is emitted
    again instead of waiting, but no fresh item is used more than ``max_factor`` times
    in total: then the consumer waits. The realised factor therefore tracks
    ``R = t_upstream / t_downstream`` capped at ``max_factor``, and with ``R <= 1``
    nothing is echoed. Decisions depend on timing, so runs are not bit-reproducible;
    use :class:`~dataecho.Echo` with a fixed factor when they must be.

    Warm-up: the first ``min_fresh`` items of a pass (and after a restore) are always
    fresh, waiting if necessary, so training never starts on echoes alone. End: the
    pass ends once the upstream is exhausted and every item it produced has been
    emitted; leftover echo budget is dropped, since nothing is waited for any more.

    Checkpoint: counters plus the upstream state right after the last fresh item this
    stage emitted. Items prefetched but not yet emitted are re-read on restore, so no
    fresh item is lost or emitted fresh twice; the echo buffer is not saved (echoes
    after a restore come from items read after it).

    Threads: the thread stops on :meth:`close` or leaving a ``with`` block, on an
    exception or KeyboardInterrupt in ``next()``, on garbage collection, and by itself
    a second after the consumer stopped reading (a ``break``). A thread inside a hung
    read cannot be interrupted: after a TimeoutError it is a daemon that lives until
    that read returns, then exits. Upstream exceptions are re-raised here with their
    original type and traceback.

    Errors: after an exception in ``next()`` (the upstream's, a TimeoutError, a
    KeyboardInterrupt) the pass does not go on: every later ``next()`` raises a
    RuntimeError chained to it, never a silent StopIteration. The fresh items of the
    failed step are uncounted, so ``load_state_dict(state_dict())`` taken after the
    error resumes exactly where the consumer stopped.

    Args:
        upstream: any iterable of batches: a DataLoader, a Ray iterator, a Stage.
        max_factor: the most uses of one fresh item, an int >= 1 (1: never echo).
            Default 4: the paper's gains grow up to e ≈ 4-8 with diminishing returns,
            and about 4 repetitions of data are nearly as good as fresh data
            (Muennighoff et al., 2023); 4 is the largest cap safe by both measures.
        min_fresh: fresh items at the start of each pass before echoing may begin.
        buffer_size: recent items echoes are drawn from; 1: the latest only, as in
            the paper's batch echoing. Default 4, because loaders deliver in bursts and
            with the latest item only a burst's other items never get their echoes
            (``benchmarks/results/bursts.md``). Memory: that many items kept alive.
        prefetch: fresh items the thread reads ahead.
        min_gap: steps between two uses of one item, at least; 0: none. Where the
            upstream is far slower than the consumer only the newest items have echo
            budget left, and without a gap their copies come back to back; with one,
            the consumer waits instead and the copies are spread (the same waits, as
            the budget is what bounds the factor there).
        timeout: seconds to wait for one fresh item before TimeoutError; None: forever.
        seed: seed of the draws from the buffer.
        size: examples in an item, for accounting; default ``sizes.default_size``.
        agree: cross-rank agreement, e.g. ``dataecho.torch.distributed.RankAgreement()``,
            so every DDP rank takes the same decisions and number of steps.
        feed: builds the feed from a ``produce()`` function; default a
            :class:`~dataecho.adaptive.Prefetcher`. Tests pass a ``SimulatedFeed``.
        clock: seconds counter for the stall accounting; default ``time.perf_counter``.

    Example:
        >>> with AdaptiveEcho([[1, 2], [3, 4]], max_factor=2) as stage:
        ...     batches = list(stage)  # 2 to 4 batches: a few echoes while the thread starts
        >>> batches[0], 2 <= len(batches) <= 4, stage.stats().fresh_examples
        ([1, 2], True, 4)
    """

    upstream: Stage[Any]
    #: Whether a step is one buffered item, so that __next__'s echo lane may emit it;
    #: a subclass whose steps are built otherwise (AdaptiveExamples) sets False.
    one_item_steps: ClassVar[bool] = True

    def __init__(
        self,
        upstream: Iterable[T],
        *,
        max_factor: int = DEFAULT_MAX_FACTOR,
        min_fresh: int = 1,
        buffer_size: int = DEFAULT_BUFFER,
        prefetch: int = 2,
        min_gap: int = 0,
        timeout: float | None = 120.0,
        seed: int = 0,
        size: Callable[[T], int] | None = None,
        agree: Agreement | None = None,
        feed: Callable[[Callable[[], Any]], Feed[Any]] | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.upstream = as_stage(upstream)
        self.max_factor = check_positive_int(max_factor, "max_factor")
        self.min_fresh = check_positive_int(min_fresh, "min_fresh")
        self.buffer_size = check_positive_int(buffer_size, "buffer_size")
        self.prefetch = check_positive_int(prefetch, "prefetch")
        self.min_gap = check_positive_int(min_gap, "min_gap", minimum=0)
        self.timeout = check_timeout(timeout)
        self.seed = check_seed(seed)
        self.agree: Agreement = check_callable(agree, "agree", "agree(ready, capacity, ended)",
                                          "pass dataecho.torch.distributed.RankAgreement() "
                                          "under DDP, or None for one process") or alone
        # One process: no vote to take, so each step takes the direct path of _assemble.
        self._solo = self.agree is alone
        self._make_feed = check_callable(feed, "feed", "feed(produce) -> Feed",
                                    "pass a function such as SimulatedFeed's constructor, "
                                    "or None for the prefetch thread") or partial(
            Prefetcher, depth=self.prefetch, timeout=self.timeout)
        self._clock = check_callable(clock, "clock", "clock() -> seconds",
                                "pass a function such as time.perf_counter, or None"
                                ) or time.perf_counter
        self._size = check_size(size) or default_size(self.upstream)
        self._buffer: EchoBuffer[tuple[Any, int]] = EchoBuffer(
            self.buffer_size, self.max_factor, self.min_gap)
        # Echo picks: the draw of step k is keyed by (seed, k), so a restore repeats them.
        self._picks = _rng.Picks(self.seed, _rng.ADAPTIVE_PICKS, _rng.ADAPTIVE_PICK_BLOCKS)
        self._feed: Feed[Any] | None = None
        self._resume: State | None = None  # upstream state after the last fresh item taken
        self._over = False  # this pass ended (exhausted, failed or closed)
        self._failure: BaseException | None = None  # what ended it, if it failed
        self._fresh = self._fresh_ex = self._emitted = self._emitted_ex = self._steps = 0
        self._warm = 0  # fresh items since the pass began or was restored
        self._first: float | None = None  # clock at the first next()
        self._end: float | None = None  # clock when the pass ended
        self._blocked = 0.0  # seconds inside next(), echoes on the lane below excepted
        # The echo lane of a warm pass in one process reading through a Prefetcher: the
        # echoes planned for the next steps, the last step's first, which __next__ pops
        # while nothing fresh is ready (the producer marks it when that changes: see
        # Channel.plan); None otherwise. While it is open, _steps is the step it was
        # planned at; _plan holds (its channel, cumulative sizes, buffer log length:
        # after each step).
        self._lane: list[Any] | None = None
        self._plan: tuple[Channel[Any], list[int], list[int]] | None = None
        self._horizon = 1  # steps the next plan decides (see _arm)
        self._fresh_step = 0  # the step that took the latest fresh item

    def __next__(self) -> T:
        planned = self._lane
        if planned:
            # The hot path of an input-bound step: emit the echo _arm planned for this
            # step, as a fixed factor emits a copy: the decision was taken already and
            # the step count is what the plan has left (_booked). The producer appends
            # the mark (the list itself) once a fresh item is ready or it stopped. An
            # echo cannot wait, so it is left out of the blocked time.
            echo = planned.pop()
            if echo is not planned:
                return echo  # type: ignore[no-any-return]
        if planned is not None:
            self._settle()  # books the lane's echoes; the step is decided below
        if self._over:
            self._ended()
        start = self._clock()
        if self._first is None:
            self._first = start
        if self._feed is None:
            self._open()  # before the snapshot below: it sets the resume state
        before = self._resume, self._fresh, self._fresh_ex
        try:
            out = self._step()
        except StopIteration:
            self._over, self._end = True, self._clock()
            self._blocked += self._end - start
            raise
        except BaseException as err:  # KeyboardInterrupt included: stop the thread, promptly
            # The fresh items this step took never reached the consumer: uncount them,
            # so a checkpoint taken now re-reads them instead of skipping them.
            self._resume, self._fresh, self._fresh_ex = before
            self._over, self._failure = True, err
            self._stop_feed(wait=0.1)  # a thread inside a hung read exits when it returns
            raise
        self._arm(self._fresh != before[1])
        self._blocked += self._clock() - start
        return out  # type: ignore[no-any-return]

    def _ended(self) -> None:
        if self._failure is None:
            raise StopIteration
        err = self._failure
        # A retry must not end the pass silently: training would stop early unnoticed.
        raise RuntimeError(
            f"{type(self).__name__} stopped at an earlier {err!r} and "
            "does not read on after it; call load_state_dict(state_dict()) to resume from "
            "the last item emitted, or build a new stage") from err

    def _step(self) -> Any:
        if self._solo:  # the hot path: what _assemble(1) decides alone, in fewer calls
            feed: Feed[Any] = self._feed  # type: ignore[assignment]  # opened by __next__
            if self.min_gap:
                self._buffer.release(self._steps)
            if feed.ready():
                value, self._resume, size = feed.get()
                index = self._fresh
                self._fresh, self._fresh_ex = index + 1, self._fresh_ex + size
                self._buffer.add((value, size), index, self._steps)
                self._warm += 1
            else:
                buffer = self._buffer
                held = buffer.capacity
                if not (held and self._warm >= self.min_fresh and not feed.finished()):
                    return self._general()
                pick = self._picks.below(self._steps, held) if held > 1 else 0
                (value, size), _, _ = buffer.take(pick, self._steps)
            self._steps += 1
            self._emitted += 1
            self._emitted_ex += size
            return value
        return self._general()

    def _general(self) -> Any:
        copies = self._assemble(1)
        if not copies:
            raise StopIteration
        self._emit(copies)
        return copies[0][0]

    def _assemble(self, need: int) -> list[Copy]:
        """Fresh items and echoes for one step, as agreed with the other ranks.

        Every take follows a vote, so all ranks take the same items in the same rounds
        and vote equally often. On "block" a rank only waits until it has an item or
        knows none will come, then votes again: the awaited item is taken only if every
        rank has one, and the step stops everywhere if any rank's upstream ended during
        the wait (taking it at once let the other ranks finish a step this one could
        not, so their later all-reduces paired with the wrong steps).
        """
        feed = self._open()
        if self.min_gap:
            self._buffer.release(self._steps)
        if self._solo:  # one process: no vote, so decide from one look at the feed
            ready = feed.ready()
            if ready >= need:  # not input-bound: fresh items only
                return self._keep([self._take(feed.get()) for _ in range(need)], need)
            # Echo the shortfall if the budget allows it and the upstream is not over
            # (finished() read after ready(): False now means it was False then).
            if (self._warm >= self.min_fresh and self._buffer.capacity >= need - ready
                    and (ready or not feed.finished())):
                fresh = [self._take(feed.get()) for _ in range(ready)]
                return self._keep(fresh + self._draw(need - ready), ready)
            # Otherwise (warm-up, a spent budget, the end) the rounds below decide.
        out: list[Copy] = []
        taken = 0  # fresh items in out
        awaited = 0  # 1 after a wait: that item is taken next (unless a rank ended), so it
        # counts towards the warm-up as it did when the wait took it at once
        while need:
            warm = self._warm + taken + awaited >= self.min_fresh
            capacity = min(self._buffer.capacity, need) if warm else 0
            finished = feed.finished()  # before ready(): no item can follow a True
            ready = feed.ready()
            p = plan(need, *self.agree(min(ready, need), capacity, finished and not ready))
            fresh = [self._take(feed.get()) for _ in range(p.fresh)]  # ready: no wait
            awaited = 0
            if p.block:
                feed.wait()  # TimeoutError for a hung upstream; its error waits for get()
                awaited = 1
            out += fresh
            taken += len(fresh)
            need -= len(fresh)
            if p.echoes:
                out += self._draw(p.echoes)
                need = 0
            if p.stop:
                if finished and not ready:
                    with suppress(StopIteration):
                        feed.get()  # raises the upstream's error, if that is why it ended
                break
        return self._keep(out, taken)

    def _keep(self, out: list[Copy], taken: int) -> list[Copy]:
        """Adds the first ``taken`` copies, the fresh ones, to the echo buffer."""
        for value, index, _, size in out[:taken]:
            self._buffer.add((value, size), index, self._steps)
        self._warm += taken
        return out

    def _arm(self, fresh: bool) -> None:
        """Plans the echoes of the next steps for __next__'s lane (one process, warm).

        Step ``k``'s echo is what :meth:`_step` would decide at ``k`` with nothing fresh
        ready: the same ``(seed, k)``-keyed pick among the same buffered items, so the
        buffer takes them now, under a record. :meth:`_settle` keeps the steps the lane
        used and undoes the rest, so the buffer, the counts and the checkpoint are as if
        every step had been decided on its own. After a step that took a fresh item
        (``fresh``) the plan reaches one step past the run of echoes before it, the
        likely run ahead; a plan that ran out is followed by one twice as long.
        """
        if fresh:
            taken = self._steps - 1
            self._horizon = max(1, min(taken - self._fresh_step, _MAX_HORIZON))
            self._fresh_step = taken
        else:
            self._horizon = min(2 * self._horizon, _MAX_HORIZON)
        feed, buffer = self._feed, self._buffer
        if not (self.one_item_steps and self._solo and self._warm >= self.min_fresh
                and isinstance(feed, Prefetcher)) or feed.channel.items or not (
                    buffer.entries or buffer.cooling):
            return  # (a fresh item ready: the next step takes it; or nothing to echo)
        channel = feed.channel
        picks, gap, start = self._picks, self.min_gap, self._steps
        buffer.record()
        log: list[Any] = buffer.log  # type: ignore[assignment]  # recording
        entries, take, below = buffer.entries, buffer.take, picks.below
        values: list[Any] = []
        sizes, marks = [0], [0]  # examples emitted, log length: after each planned step
        for step in range(start, start + self._horizon):
            if gap:
                buffer.release(step)
            held = len(entries)
            if not held:  # nothing left to echo: that step waits, on the general path
                break
            (value, size), _, _ = take(below(step, held) if held > 1 else 0, step)
            values.append(value)
            sizes.append(sizes[-1] + size)
            marks.append(len(log))
        values.reverse()  # popped from the end
        if values:
            # Publish, then look (no lock): an item that arrived before is seen here,
            # one that arrives after finds the plan and marks it, for the producer
            # appends the item (or clears ``running``) before it reads ``plan``.
            channel.plan = values
            if not channel.items and channel.running:
                self._lane, self._plan = values, (channel, sizes, marks)
                return
            channel.plan = None
        buffer.rollback(0)  # nothing to echo, an item arrived, or the upstream is over

    def _settle(self) -> None:
        """Books the lane's echoes, undoes the planned steps it did not take, closes it."""
        lane, self._lane = self._lane, None
        if lane is None:
            return
        channel, sizes, marks = self._plan  # type: ignore[misc]  # set with the lane
        self._plan = None
        if channel.plan is lane:  # not marked: a mark that comes now lands on a dropped list
            channel.plan = None
        planned = len(marks) - 1
        done = planned - _left(lane)
        lane.clear()
        self._buffer.rollback(marks[done])
        self._steps += done
        self._emitted += done
        self._emitted_ex += sizes[done]

    def _booked(self) -> tuple[int, int, int]:
        """(steps, emitted items, emitted examples), the lane's echoes included."""
        lane = self._lane
        if lane is None:
            return self._steps, self._emitted, self._emitted_ex
        _, sizes, marks = self._plan  # type: ignore[misc]  # set with the lane
        done = len(marks) - 1 - _left(lane)
        return self._steps + done, self._emitted + done, self._emitted_ex + sizes[done]

    def _take(self, produced: tuple[Any, State, int]) -> Copy:
        value, self._resume, size = produced
        index = self._fresh
        self._fresh += 1
        self._fresh_ex += size
        return value, index, 0, size

    def _draw(self, n: int) -> list[Copy]:
        held = self._buffer.capacity
        if n == 1 and held > 1:  # the usual choice: one integer, drawn cheaply
            (v, size), i, use = self._buffer.take(self._picks.below(self._steps, held),
                                                  self._steps)
            return [(v, i, use, size)]
        # The (seed, step)-keyed generator only where there is a choice to make.
        choice = self._picks.at(self._steps) if held > n else None
        return [(v, i, use, size) for (v, size), i, use in self._buffer.draw(n, choice,
                                                                             self._steps)]

    def _emit(self, copies: list[Copy]) -> None:
        self._steps += 1
        self._emitted += len(copies)
        self._emitted_ex += copies[0][3] if len(copies) == 1 else sum(c[3] for c in copies)

    def _open(self) -> Feed[Any]:
        if self._feed is None:
            self._resume = self.upstream.state_dict()
            self._feed = self._make_feed(reader(self.upstream, self._size))
        return self._feed

    def _stop_feed(self, wait: float = 5.0) -> None:
        self._settle()
        if self._feed is not None:
            self._feed.close(wait)

    def close(self) -> None:
        """Stops the prefetch thread, then closes the upstream; the pass is over."""
        self._over = True
        self._stop_feed()
        super().close()

    def queued(self) -> int:
        """Fresh items read ahead and waiting; a queue that stays full means not input-bound."""
        return 0 if self._feed is None or self._over else self._feed.ready()

    def timing(self) -> AdaptiveStats:
        """Echo counts plus blocked time and stall fraction since the first ``next()``."""
        end = self._end if self._end is not None else self._clock()
        wall = 0.0 if self._first is None else end - self._first
        return AdaptiveStats(self.stats(), self._booked()[0], self._blocked, wall)

    def echo_counts(self) -> tuple[int, int, int, int]:
        """(fresh_examples, emitted_examples, fresh_items, emitted_items)."""
        _, emitted, emitted_ex = self._booked()
        return self._fresh_ex, emitted_ex, self._fresh, emitted

    def _config(self) -> dict[str, Any]:
        config = {"max_factor": self.max_factor, "min_fresh": self.min_fresh,
                  "buffer_size": self.buffer_size, "seed": self.seed}
        if self.min_gap:  # absent at 0: states saved before min_gap existed still load
            config["min_gap"] = self.min_gap
        return config

    def _repr_args(self) -> dict[str, Any]:
        args = {"max_factor": self.max_factor, "min_fresh": self.min_fresh,
                "prefetch": self.prefetch}
        if self.buffer_size > 1:
            args |= {"buffer_size": self.buffer_size, "seed": self.seed}
        if self.min_gap:
            args["min_gap"] = self.min_gap
        return args

    def _snapshot(self) -> State:
        upstream = self._resume if self._resume is not None else self.upstream.state_dict()
        steps, emitted, emitted_ex = self._booked()
        return {"upstream": upstream, "fresh": self._fresh, "fresh_examples": self._fresh_ex,
                "emitted": emitted, "emitted_examples": emitted_ex, "steps": steps}

    def _set_state(self, state: Mapping[str, Any]) -> None:
        self._stop_feed()
        self._feed, self._over, self._failure, self._warm = None, False, None, 0
        self._buffer.clear()
        self.upstream.load_state_dict(state["upstream"])
        self._resume = dict(state["upstream"])
        self._fresh, self._fresh_ex = int(state["fresh"]), int(state["fresh_examples"])
        self._emitted, self._emitted_ex = int(state["emitted"]), int(state["emitted_examples"])
        self._steps = self._fresh_step = int(state["steps"])
