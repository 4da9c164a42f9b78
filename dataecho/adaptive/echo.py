"""Adaptive batch echoing: repeat a recent batch only while the fresh one is late."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar, TypeVar

from .. import _rng
from .._checks import (
    check_callable,
    check_positive_int,
    check_seed,
    check_size,
    check_timeout,
    state_int,
    state_mapping,
)
from ..factor import AUTO_BUFFER, DEFAULT_MAX_FACTOR
from ..readers import as_stage
from ..sizes import default_size
from ..stage import Stage, State
from ..stats import EchoStats
from .buffer import EchoBuffer
from .prefetch import Channel, Prefetcher, reader
from .schedule import Agreement, Feed, Scheduler, alone
from .spacing import gap_for, items_left, warn_spacing

T = TypeVar("T")

_MOST = 2**63 - 1  # a counter past this is damaged: no run reads that many items
_MAX_HORIZON = 64  # steps the echo lane plans at once, at most

#: Recent items echoes are drawn from, by default: ``Auto``'s for whole items.
DEFAULT_BUFFER = AUTO_BUFFER["items"]


class AdaptiveEcho(Stage[T]):
    """Yields the next upstream item if it is ready, else an echo of a recent one.

    A background thread reads ``upstream`` ahead. A ready fresh item wins; when none is
    ready, one of the ``buffer_size`` latest items, picked by a ``(seed, step)``-keyed
    draw, is emitted again instead of waiting, until each was used ``max_factor``
    times: then the consumer waits. The realised factor thus tracks ``R = t_upstream /
    t_downstream`` capped at ``max_factor``, and is 1 at ``R <= 1``. Decisions depend
    on timing: use :class:`~dataecho.Echo` where runs must be bit-reproducible.

    The first ``min_fresh`` items of a pass (and after a restore) are fresh; the pass
    ends once the upstream is exhausted and every item read was emitted. A checkpoint
    holds counters and the upstream state after the last fresh item emitted: items read
    ahead are read again. The thread stops on :meth:`close` (or a ``with`` block's end),
    an exception in ``next()``, garbage collection, and a second after the consumer
    stopped reading. Upstream exceptions are re-raised as they were; after any exception
    in ``next()``, later calls raise a RuntimeError chained to it.

    Args:
        upstream: any iterable of batches: a DataLoader, a Ray iterator, a Stage.
        max_factor: the most uses of one fresh item, an int >= 1 (1: never echo); about 4
            uses are nearly as good as fresh data (Muennighoff et al., 2023).
        min_fresh: fresh items at the start of each pass before echoing may begin.
        buffer_size: recent items echoes are drawn from (kept alive); 1: the latest, as in
            the paper, never the rest of a burst (``benchmarks/results/bursts.md``).
        prefetch: fresh items the thread reads ahead.
        min_gap: steps between two uses of one item, at least; 0: none. A pass of a
            known length (reading a :class:`~dataecho.Source` part) spaces them at most
            a quarter of its items apart, or it might never echo; a pass too short for
            ``min_gap`` that was late (a stream's) warns at its end.
        timeout: seconds to wait for one fresh item before TimeoutError; None: forever.
        seed: seed of the draws from the buffer.
        size: examples in an item, for accounting; default ``sizes.default_size``.
        agree: cross-rank agreement, e.g. ``dataecho.torch.distributed.RankAgreement()``,
            so every DDP rank takes the same decisions and number of steps.
        feed: ``feed(produce)`` builds the feed; default a :class:`Prefetcher` thread.
        clock: seconds counter for the stall accounting; default ``time.perf_counter``.

    Example:
        >>> with AdaptiveEcho([[1, 2], [3, 4]], max_factor=2) as stage:
        ...     batches = list(stage)  # 2 to 4 batches: a few echoes while the thread starts
        >>> batches[0], 2 <= len(batches) <= 4, stage.stats().fresh_examples
        ([1, 2], True, 4)
    """

    VERSION = 2  # 2: the config holds min_gap at 0 too
    upstream: Stage[Any]
    #: Whether a step is one item, which the echo lane may emit (AdaptiveExamples: False).
    one_item_steps: ClassVar[bool] = True

    def __init__(self, upstream: Iterable[T], *, max_factor: int = DEFAULT_MAX_FACTOR,
                 min_fresh: int = 1, buffer_size: int = DEFAULT_BUFFER, prefetch: int = 2,
                 min_gap: int = 0, timeout: float | None = 120.0, seed: int = 0,
                 size: Callable[[T], int] | None = None, agree: Agreement | None = None,
                 feed: Callable[[Callable[[], Any]], Feed[Any]] | None = None,
                 clock: Callable[[], float] | None = None) -> None:
        self.upstream = as_stage(upstream)
        self.max_factor = check_positive_int(max_factor, "max_factor")
        self.min_fresh = check_positive_int(min_fresh, "min_fresh")
        self.buffer_size = check_positive_int(buffer_size, "buffer_size")
        self.prefetch = check_positive_int(prefetch, "prefetch")
        self.min_gap = check_positive_int(min_gap, "min_gap", minimum=0)
        self.timeout = check_timeout(timeout)
        self.seed = check_seed(seed)
        self.agree: Agreement = check_callable(
            agree, "agree", "agree(ready, capacity, ended)", "pass dataecho.torch.distributed."
            "RankAgreement() under DDP, or None for one process") or alone
        self._solo = self.agree is alone  # one process: the echo lane may plan ahead
        self._make_feed = check_callable(
            feed, "feed", "feed(produce) -> Feed", "pass a function such as SimulatedFeed's "
            "constructor, or None for the prefetch thread"
        ) or partial(Prefetcher, depth=self.prefetch, timeout=self.timeout)
        self._clock = check_callable(clock, "clock", "clock() -> seconds", "pass a function "
                                     "such as time.perf_counter, or None") or time.perf_counter
        self._size = check_size(size) or default_size(self.upstream)
        # Echo picks: the draw of step k is keyed by (seed, k), so a restore repeats them.
        self._picks = _rng.Picks(self.seed, _rng.ADAPTIVE_PICKS, _rng.ADAPTIVE_PICK_BLOCKS)
        self._schedule = Scheduler(EchoBuffer(self.buffer_size, self.max_factor, self.min_gap),
                                   self._picks, self.agree, self.min_fresh)
        self._feed: Feed[Any] | None = None
        self._over = False  # this pass ended (exhausted, failed or closed)
        self._failure: BaseException | None = None  # what ended it, if it failed
        self._first: float | None = None  # clock at the first next()
        self._end: float | None = None  # clock when the pass ended
        self._blocked = 0.0  # seconds inside next(), echoes on the lane excepted
        self._lane: list[Any] | None = None  # Scheduler.ahead's echoes, popped
        self._channel: Channel[Any] | None = None  # the Prefetcher's, where a lane may open
        self._horizon = 1  # steps the next lane plans
        self._fresh_step = 0  # the step that took the latest fresh item

    def __next__(self) -> T:
        lane = self._lane
        if lane:  # an input-bound step: the scheduler's answer, taken when the lane opened
            echo = lane.pop()  # (an echo cannot wait: left out of the blocked time)
            if echo is not lane:  # else the mark: a fresh item is ready, or the thread ended
                return echo  # type: ignore[no-any-return]
        if lane is not None:
            self._settle()
        if self._over:
            if self._failure is None:
                raise StopIteration
            # A retry must not end the pass silently: training would stop early unnoticed.
            raise RuntimeError(
                f"{type(self).__name__} stopped at an earlier {self._failure!r} and does not "
                "read on after it; call load_state_dict(state_dict()) to resume from the "
                "last item emitted, or build a new stage") from self._failure
        schedule, start = self._schedule, self._clock()
        if self._first is None:
            self._first = start
        if self._feed is None:  # before the snapshot below: this sets the resume state
            schedule.resume = self.upstream.state_dict()
            # Spaced for this pass: a gap as long as the pass would hold back all its echoes.
            schedule.buffer.gap = gap_for(self.min_gap, items_left(self.upstream))
            self._feed = feed = schedule.feed = self._make_feed(reader(self.upstream, self._size))
            laned = self.one_item_steps and self._solo and isinstance(feed, Prefetcher)
            self._channel = feed.channel if laned else None
        before = schedule.resume, schedule.fresh, schedule.fresh_ex
        try:
            out = self._step()
        except StopIteration:
            self._over, self._end = True, self._clock()
            self._blocked += self._end - start
            warn_spacing(type(self).__name__, schedule.buffer.gap, schedule.warm,
                          schedule.spaced_waits)
            raise
        except BaseException as err:  # KeyboardInterrupt included: stop the thread, promptly
            # The fresh items this step took never reached the consumer: uncount them,
            # so a checkpoint taken now re-reads them instead of skipping them.
            schedule.resume, schedule.fresh, schedule.fresh_ex = before
            self._over, self._failure = True, err
            self._stop_feed(wait=0.1)  # a thread inside a hung read exits when it returns
            raise
        # The echo lane (one process, a warm pass, a Prefetcher, nothing ready): the next
        # steps' echoes until the thread marks it (Channel), one step past the run of echoes
        # before a fresh step, else twice the lane that ran out (no min(), max(): per step).
        if schedule.fresh != before[1]:
            run, self._fresh_step = schedule.steps - 1 - self._fresh_step, schedule.steps - 1
            self._horizon = 1 if run < 1 else run if run < _MAX_HORIZON else _MAX_HORIZON
        else:
            self._horizon = min(2 * self._horizon, _MAX_HORIZON)
        channel = self._channel
        if channel is not None and not channel.items:  # (ahead() waits for a warm pass)
            lane = schedule.ahead(self._horizon)
            if lane:
                # Publish, then look (no lock): an item that arrived before is seen here, one
                # after marks the lane, as the producer appends it before it reads ``plan``.
                channel.plan = lane
                if not channel.items and channel.running:
                    self._lane = lane
                else:
                    channel.plan = None
                    schedule.settle()  # an item arrived, or the upstream is over: undo it
        self._blocked += self._clock() - start
        return out

    @property
    def first_copy(self) -> bool:
        """Whether the item ``next()`` returned last is its fresh item's first copy."""
        return self._schedule.copy_of()[1]

    def copies_of(self) -> Callable[[], tuple[int, bool]] | None:
        """Tells which fresh item the item just returned copies, and if it is its first copy.

        ``(number from 1, first)``: not first for an echo, before the first item or after a
        restore. None for :class:`AdaptiveExamples`, whose items are batches.

        Example:
            >>> with AdaptiveEcho([7], max_factor=1) as stage:
            ...     copy_of = stage.copies_of()
            ...     [(item, *copy_of()) for item in stage]
            [(7, 1, True)]
        """
        return self._schedule.copy_of if self.one_item_steps else None

    def _step(self) -> T:
        return self._schedule.one()  # type: ignore[no-any-return]

    def _settle(self) -> None:
        """Books the lane's echoes, undoes the planned steps it did not emit, closes it."""
        lane, self._lane, channel = self._lane, None, self._channel
        if channel is not None and channel.plan is lane:  # not marked: a mark that comes
            channel.plan = None  # now lands on a dropped list
        self._schedule.settle()

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
        return AdaptiveStats(self.stats(), self._schedule.counts()[0], self._blocked, wall)

    def echo_counts(self) -> tuple[int, int, int, int]:
        """(fresh_examples, emitted_examples, fresh_items, emitted_items)."""
        _, emitted, emitted_ex = self._schedule.counts()
        return self._schedule.fresh_ex, emitted_ex, self._schedule.fresh, emitted

    def _config(self) -> dict[str, Any]:
        return {"max_factor": self.max_factor, "min_fresh": self.min_fresh,
                "buffer_size": self.buffer_size, "min_gap": self.min_gap, "seed": self.seed}

    def _repr_args(self) -> dict[str, Any]:
        args = {"max_factor": self.max_factor, "min_fresh": self.min_fresh,
                "prefetch": self.prefetch}
        if self.buffer_size > 1:
            args |= {"buffer_size": self.buffer_size, "seed": self.seed}
        if self.min_gap:
            args["min_gap"] = self.min_gap
        return args

    def _snapshot(self) -> State:
        schedule = self._schedule
        upstream = schedule.resume if schedule.resume is not None else self.upstream.state_dict()
        steps, emitted, emitted_ex = schedule.counts()
        return {"upstream": upstream, "fresh": schedule.fresh, "fresh_examples": schedule.fresh_ex,
                "emitted": emitted, "emitted_examples": emitted_ex, "steps": steps}

    def _set_state(self, state: Mapping[str, Any]) -> None:
        name, cap = type(self).__name__, self.max_factor
        upstream = state_mapping(state, "upstream", name)
        fresh = state_int(state, "fresh", name, maximum=_MOST, rule="fresh items read")
        fresh_ex = state_int(state, "fresh_examples", name, maximum=_MOST,
                             rule="fresh examples read")
        emitted = state_int(state, "emitted", name, maximum=cap * fresh,
                            rule=f"uses of the {fresh} fresh items, at most max_factor={cap} each")
        emitted_ex = state_int(state, "emitted_examples", name, maximum=cap * fresh_ex,
                               rule=f"uses of the {fresh_ex} fresh examples, at most "
                               f"max_factor={cap} each")
        steps = state_int(state, "steps", name, maximum=_MOST, rule="steps taken")
        self._stop_feed()
        self._feed, self._over, self._failure = None, False, None
        self.upstream.load_state_dict(upstream)
        self._schedule.resume = dict(upstream)
        self._schedule.restart(fresh, fresh_ex, emitted, emitted_ex, steps)
        self._fresh_step = steps


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
