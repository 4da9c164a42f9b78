"""A background thread that reads upstream ahead of the consumer into a bounded queue.

The thread holds no reference to its owner, so an owner that is dropped (a ``break``
out of an unnamed loop, garbage collection) is finalised and stops it. A thread whose
queue stays full for ``park_after`` seconds (the consumer left the loop) returns and
is restarted transparently when the consumer reads again, so an abandoned loop leaves
no thread behind either. Upstream exceptions are handed to the consumer and raised
there as the same object, with its original type and traceback.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from ._checks import check_positive_int
from .echo import _find_batcher

if TYPE_CHECKING:
    from .stage import Stage, State

T = TypeVar("T")

# The consumer waits in short slices so a KeyboardInterrupt is raised promptly even
# when the signal was delivered to another thread.
_SLICE_S = 0.1


class _Channel(Generic[T]):
    """State shared by the consumer and the producer thread, guarded by ``cond``."""

    def __init__(self, depth: int) -> None:
        self.cond = threading.Condition()
        self.items: deque[T] = deque()
        self.depth = depth
        self.running = False  # a producer thread is alive (or starting)
        self.done = False  # the upstream is over: exhausted or failed
        self.stop = False  # the consumer closed the channel
        self.error: BaseException | None = None

    def shut(self) -> None:
        with self.cond:
            self.stop = True
            self.items.clear()
            self.cond.notify_all()


def _produce(ch: _Channel[T], produce: Callable[[], T], park_after: float) -> None:
    try:
        while True:
            with ch.cond:
                room = ch.cond.wait_for(lambda: ch.stop or len(ch.items) < ch.depth,
                                        timeout=park_after)
                if ch.stop or not room:
                    return  # closed, or parked: nobody has read for park_after seconds
            try:
                item = produce()
            except StopIteration:
                with ch.cond:
                    ch.done = True
                return
            except BaseException as err:  # handed over to the consumer
                with ch.cond:
                    ch.error, ch.done = err, True
                return
            with ch.cond:
                if ch.stop:
                    return
                ch.items.append(item)
                ch.cond.notify_all()
    finally:
        with ch.cond:
            ch.running = False
            ch.cond.notify_all()


class Prefetcher(Generic[T]):
    """Calls ``produce()`` in a daemon thread, keeping up to ``depth`` results queued.

    Args:
        produce: returns the next item; raises StopIteration at the end. It runs in
            the thread, so it must not touch state the consumer uses meanwhile.
        depth: queue length, an int >= 1.
        timeout: seconds :meth:`get` waits for one item before raising TimeoutError;
            None waits forever.
        park_after: seconds with a full queue after which the thread exits until
            the next read.
        name: the thread's name.

    Example:
        >>> feed = Prefetcher(iter([1, 2]).__next__, depth=2)
        >>> feed.get(), feed.get()
        (1, 2)
        >>> feed.close()
    """

    def __init__(self, produce: Callable[[], T], *, depth: int = 2,
                 timeout: float | None = 120.0, park_after: float = 1.0,
                 name: str = "dataecho-prefetch") -> None:
        self._ch: _Channel[T] = _Channel(check_positive_int(depth, "prefetch"))
        self._produce, self.timeout = produce, _check_timeout(timeout)
        self._park_after, self._name = park_after, name
        self._thread: threading.Thread | None = None
        self._finalizer = weakref.finalize(self, self._ch.shut)

    def _ensure_running(self) -> None:  # called with the lock held
        ch = self._ch
        if not (ch.running or ch.done or ch.stop) and len(ch.items) < ch.depth:
            ch.running = True
            self._thread = threading.Thread(
                target=_produce, args=(ch, self._produce, self._park_after),
                name=self._name, daemon=True)
            self._thread.start()

    def ready(self) -> int:
        """Items :meth:`get` returns without waiting."""
        with self._ch.cond:
            self._ensure_running()
            return len(self._ch.items)

    def finished(self) -> bool:
        """True once no item will follow the queued ones (upstream over, or closed)."""
        with self._ch.cond:
            return self._ch.done or self._ch.stop

    def get(self) -> T:
        """The next item, waiting up to ``timeout`` seconds.

        Raises:
            StopIteration: the upstream is exhausted, or the prefetcher was closed.
            TimeoutError: nothing arrived within ``timeout`` seconds.
            BaseException: whatever the upstream raised, as the same object.
        """
        ch = self._ch
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        with ch.cond:
            self._ensure_running()
            while not (ch.items or ch.done or ch.stop):
                left = _SLICE_S if deadline is None else deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(
                        f"upstream produced no item within timeout={self.timeout} s "
                        "(a hung reader or a far slower upstream than expected); pass a "
                        "larger timeout, or timeout=None to wait forever")
                ch.cond.wait(min(left, _SLICE_S))
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

    def close(self, wait: float = 5.0) -> None:
        """Stops the thread, discarding queued items; waits up to ``wait`` seconds.

        A thread blocked inside a hung ``produce()`` cannot be interrupted; it is a
        daemon and exits as soon as that call returns.
        """
        self._finalizer()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread() and wait > 0:
            thread.join(wait)


def reader(upstream: Stage[Any], size: Callable[[Any], int]
           ) -> Callable[[], tuple[Any, State, int]]:
    """The thread's job for a stage: read one item, note the state after it and its size.

    The state lets the consumer checkpoint the position of the last item it took. A
    closure over the upstream only, never the downstream stage, so that stage can be
    garbage-collected while the thread runs.

    Example:
        >>> from dataecho import Source
        >>> produce = reader(Source([7, 8], shuffle=False), size=lambda item: 1)
        >>> item, state, size = produce()
        >>> item, state["index"], size
        (7, 1, 1)
    """
    def produce() -> tuple[Any, State, int]:
        item = next(upstream)
        return item, upstream.state_dict(), int(size(item))
    return produce


def default_size(upstream: Stage[Any]) -> Callable[[Any], int]:
    """How ``reader`` counts examples: a ``Batch`` stage's own count, else :func:`batch_len`.

    Example:
        >>> from dataecho import as_stage
        >>> default_size(as_stage([]))([[0.1, 0.2], [0.3, 0.4], [0.5, 0.6]])
        3
    """
    batcher = _find_batcher(upstream)
    if batcher is not None:
        return lambda _: int(batcher.last_size)
    return batch_len


def batch_len(batch: object) -> int:
    """Examples in a batch: the leading dimension of its first array, else its length.

    A tuple is read as a tuple of fields (first field counted), a list as a list of
    examples; pass ``size=`` to a stage when a batch is laid out otherwise.

    Example:
        >>> import numpy as np
        >>> batch_len((np.zeros((8, 3)), np.zeros(8))), batch_len(["a", "b"]), batch_len(7)
        (8, 2, 1)
    """
    if isinstance(batch, Mapping):
        batch = next(iter(batch.values()), None)
    shape = getattr(batch, "shape", None)
    if shape is not None:
        return int(shape[0]) if len(shape) else 1
    if isinstance(batch, tuple | list):
        if batch and (isinstance(batch, tuple) or hasattr(batch[0], "shape")):
            return batch_len(batch[0])
        return len(batch)
    return 1


def _check_timeout(timeout: object) -> float | None:
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
        raise ValueError(
            f"timeout must be a number of seconds > 0 or None, got {timeout!r}; pass e.g. "
            "timeout=120, or timeout=None to wait for the upstream forever")
    return float(timeout)
