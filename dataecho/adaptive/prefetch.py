"""The prefetch thread: reads upstream ahead of the consumer into a bounded queue."""

from __future__ import annotations

import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from .._checks import check_count, check_positive_int, check_timeout

if TYPE_CHECKING:
    from ..stage import Stage, State

T = TypeVar("T")

_SLICE_S = 0.1  # the consumer waits in slices: a KeyboardInterrupt is raised promptly


class Channel(Generic[T]):
    """State shared by the consumer and the producer thread, guarded by ``cond``.

    The consumer reads ``items`` (its length), ``done`` and ``stop`` without the lock: one
    read each under the GIL, and the flags only turn True. It sets ``plan``, its echo lane,
    without the lock before it looks at ``items`` and ``running`` again; once an item comes
    or the producer exits, the producer appends the list to itself (a mark) and clears it.
    """

    __slots__ = ("cond", "depth", "done", "error", "items", "plan", "producer", "running",
                 "stop")

    def __init__(self, depth: int) -> None:
        self.cond = threading.Condition()
        self.items: deque[T] = deque()
        self.depth = depth
        self.running = False  # a producer thread is alive (or starting)
        self.done = False  # the upstream is over: exhausted or failed
        self.stop = False  # the consumer closed the channel
        self.error: BaseException | None = None
        self.producer: threading.Thread | None = None  # the running producer, if any
        self.plan: list[Any] | None = None  # the consumer's echoes ahead (see above)

    def shut(self) -> None:
        with self.cond:
            self.stop = True
            self.items.clear()
            self.wake()

    def wake(self) -> None:
        """Marks the consumer's plan, if any (see above), and wakes the waiters; lock held."""
        plan = self.plan
        if plan is not None:
            self.plan = None
            plan.append(plan)
        self.cond.notify_all()


def _produce(ch: Channel[T], produce: Callable[[], T], park_after: float) -> None:
    # Every exit clears ``running`` in the critical section that decided it: cleared
    # later, a consumer could see a producer "running" that had already quit, and wait.
    try:
        while True:
            with ch.cond:
                room = ch.cond.wait_for(lambda: ch.stop or len(ch.items) < ch.depth,
                                        timeout=park_after)
                if ch.stop or not room:
                    return _exit(ch)  # closed, or parked: nobody read for park_after s
            try:
                item = produce()
            except BaseException as err:  # the end, or an error handed to the consumer
                with ch.cond:
                    ch.error = None if isinstance(err, StopIteration) else err
                    ch.done = True
                    return _exit(ch)
            with ch.cond:
                if ch.stop:
                    return _exit(ch)
                ch.items.append(item)
                ch.wake()
    finally:
        with ch.cond:
            if ch.running and threading.current_thread() is ch.producer:
                _exit(ch)  # an unexpected exit (e.g. an error in wait_for itself)


def _exit(ch: Channel[Any]) -> None:  # called with the lock held
    ch.running, ch.producer = False, None
    ch.wake()


class Prefetcher(Generic[T]):
    """Calls ``produce()`` in a daemon thread, keeping up to ``depth`` results queued.

    The thread holds no reference to the prefetcher: a dropped one is finalised, and
    stops it.

    Args:
        produce: returns the next item; raises StopIteration at the end. It runs in
            the thread: it must not touch state the consumer uses meanwhile.
        depth: queue length, an int >= 1.
        timeout: seconds :meth:`get` waits for an item before TimeoutError; None: forever.
        park_after: seconds with a full queue after which the thread exits until the next read.

    Example:
        >>> feed = Prefetcher(iter([1, 2]).__next__, depth=2)
        >>> feed.get(), feed.get()
        (1, 2)
        >>> feed.close()
    """

    def __init__(self, produce: Callable[[], T], *, depth: int = 2,
                 timeout: float | None = 120.0, park_after: float = 1.0) -> None:
        #: The queue and flags shared with the thread (read-only but for ``plan``).
        self.channel: Channel[T] = Channel(check_positive_int(depth, "prefetch"))
        self._produce, self.timeout, self._park_after = produce, check_timeout(timeout), park_after
        self._thread: threading.Thread | None = None
        self._finalizer = weakref.finalize(self, self.channel.shut)

    def _ensure_running(self) -> None:  # called with the lock held
        ch = self.channel
        if not (ch.running or ch.done or ch.stop) and len(ch.items) < ch.depth:
            ch.running = True
            self._thread = ch.producer = threading.Thread(
                target=_produce, args=(ch, self._produce, self._park_after),
                name="dataecho-prefetch", daemon=True)
            self._thread.start()

    def ready(self) -> int:
        """Items :meth:`get` returns without waiting."""
        ch = self.channel  # no lock but to start a thread: see Channel
        if not (ch.running or ch.done or ch.stop):
            with ch.cond:
                self._ensure_running()
        return len(ch.items)

    def finished(self) -> bool:
        """True once no item will follow the queued ones (upstream over, or closed)."""
        return self.channel.done or self.channel.stop  # they only turn True: no lock

    def get(self) -> T:
        """The next item, waiting up to ``timeout`` seconds (then TimeoutError); StopIteration
        at the end or once closed, and what the upstream raised as is."""
        ch = self.channel
        if ch.items and ch.running:  # ready, and a producer refills: no wait, no lock
            try:  # (not contextlib.suppress: three Python calls more on every item)
                item = ch.items.popleft()
                if len(ch.items) == ch.depth - 1:  # was full: the producer waits for room
                    with ch.cond:
                        ch.cond.notify_all()
                return item
            except IndexError:  # emptied meanwhile by close(): take the slow path
                pass
        with ch.cond:
            self._await()
            if ch.items:
                item = ch.items.popleft()
                ch.cond.notify_all()
                return item
            if ch.error is not None and not ch.stop:
                err, ch.error = ch.error, None
                ch.stop = True  # like a generator: finished after raising once
                err.add_note("(raised by the upstream in the dataecho prefetch thread)")
                raise err
            raise StopIteration

    def wait(self) -> None:
        """Waits until :meth:`get` would not, taking nothing, so ranks agree on a take after;
        an upstream error is left for :meth:`get`, TimeoutError as there."""
        with self.channel.cond:
            self._await()

    def _await(self) -> None:  # called with the lock held
        ch = self.channel
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        self._ensure_running()  # refills the queue behind the item get() takes next
        while not (ch.items or ch.done or ch.stop):
            self._ensure_running()  # again after every wake-up: the thread may park
            left = _SLICE_S if deadline is None else deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(
                    f"upstream produced no item within timeout={self.timeout} s "
                    "(a hung reader or a far slower upstream than expected); pass a "
                    "larger timeout, or timeout=None to wait forever")
            ch.cond.wait(min(left, _SLICE_S))

    def close(self, wait: float = 5.0) -> None:
        """Stops the thread, dropping queued items; waits up to ``wait`` seconds for it. Only a
        thread inside a hung ``produce()`` cannot stop: a daemon, it exits when that returns."""
        self._finalizer()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread() and wait > 0:
            thread.join(wait)


def reader(upstream: Stage[Any], size: Callable[[Any], int]
           ) -> Callable[[], tuple[Any, State, int]]:
    """The thread's job for a stage: an item, the upstream's state after it, its size.

    A closure over the upstream only, so the downstream stage can be collected meanwhile.

    Example:
        >>> from dataecho import Source
        >>> produce = reader(Source([7, 8], shuffle=False), size=lambda item: 1)
        >>> item, state, size = produce()
        >>> item, state["index"], size
        (7, 1, 1)
    """
    def produce() -> tuple[Any, State, int]:
        item = next(upstream)
        return item, upstream.state_dict(), check_count(size(item), item)
    return produce
