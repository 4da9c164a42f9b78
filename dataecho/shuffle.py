"""The shuffle stage: a windowed shuffle buffer that checkpoints without elements."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from . import _rng
from ._checks import check_positive_int, check_seed, state_int, state_mapping
from .readers import as_stage
from .stage import Stage, State, read_into

T = TypeVar("T")

#: The most items of the next window read at a time while a window goes out (a
#: quarter of the window if less): the reads follow the items leaving, a chunk at a
#: time, which costs one test per item, and never hold more than a window.
CHUNK = 128

#: The most items a default window (:func:`window_of`) holds: 65,536 items are ten
#: batches of 256 at factor 25, yet take seconds to read and at most a few GB of images.
MAX_WINDOW = 2**16


class Shuffle(Stage[T]):
    """Reads ``buffer_size`` items, yields them in a random order, repeats.

    After an ``Echo``, this spreads the copies of an example over the window, so a
    batch holds about ``batch_size`` distinct examples instead of ``batch_size /
    factor``. Windows of at least ten batches make repeated examples in one batch
    rare; ``buffer_size=1`` keeps copies adjacent.

    Unlike a sliding buffer, a window can be rebuilt from the upstream state at its
    start, so the checkpoint holds that state plus the position in the window, never
    the elements (restoring re-reads the window). The order of window ``w`` is a
    function of ``(seed, w)``. While a window goes out, the next one is read as its items
    leave, a chunk (:data:`CHUNK`) at a time: the upstream is read at that pace, not a whole
    window at once after every ``buffer_size`` items (a reader that waits for a network
    would idle the link during the drain and then stall the trainer for the refill).
    Memory: ``buffer_size`` items (what is left of one window and what is read of the
    next).

    If the upstream raises while a window is being read (a transient read error), the
    items read so far are kept and the next call goes on filling the same window. A
    checkpoint taken meanwhile holds the upstream state at the window's start, so a
    restore re-reads them.

    Args:
        upstream: any iterable.
        buffer_size: items per window, an int >= 1.
        seed: seed of the window permutations.

    Example:
        >>> list(Shuffle(range(5), buffer_size=5))
        [0, 1, 4, 3, 2]
    """

    upstream: Stage[Any]

    def __init__(self, upstream: Iterable[T], buffer_size: int, *, seed: int = 0) -> None:
        self.upstream = as_stage(upstream)
        self.buffer_size = check_positive_int(buffer_size, "buffer_size")
        self.seed = check_seed(seed)
        # The window going out: in its order, each slot emptied as its item leaves.
        self._buf: list[Any] = []
        self._pos = 0
        self._window = 0  # index of the window in _buf
        self._start: Any = None  # upstream snapshot from when the window in _buf began
        # The next window, read while _buf goes out: None until its read begins.
        self._items: list[Any] | None = None
        self._next = 0  # its index
        self._next_start: Any = None  # upstream snapshot from when it began
        self._ended = False  # the upstream ended while it was read
        self._skip = 0  # items of the next window a restore already emitted
        self._owed = 0  # items of the next window a restore still has to read
        self._due = 0  # the position in _buf at which the next chunk of it is read
        self._stop = 0  # the position at which a call has more to do: min(len(_buf), _due)
        self._probe: Callable[[], tuple[int, bool]] | None = None  # upstream's copies_of()
        self._read: list[tuple[int, bool]] = []  # its answers for _items, in read order
        self._copies: list[tuple[int, bool]] = []  # this stage's answers for _buf

    def __next__(self) -> T:
        pos = self._pos
        if pos >= self._stop:  # one test per item: the window is done or a chunk is due
            if pos >= len(self._buf):
                self._fill()
                pos = self._pos
            else:
                self._read_ahead(pos)
            self._stop = min(len(self._buf), self._due)
        buf = self._buf
        item = buf[pos]
        buf[pos] = None  # drop our reference early: items can be large
        self._pos = pos + 1
        return item  # type: ignore[no-any-return]

    def _read_ahead(self, pos: int) -> None:
        """Reads the next window up to as many items as have left this one (and what a
        restore that an upstream error cut short still owes); says when to read next."""
        items = self._items
        if items is not None and not self._ended:
            self._read_up_to(items, min(self.buffer_size, max(pos, self._owed)))
            self._owed = 0
        self._due_after(items)

    def _due_after(self, items: list[Any] | None) -> None:
        if items is None or self._ended:
            self._due = len(self._buf)
        else:  # a chunk behind the items leaving: held items stay within a window
            self._due = len(items) + max(1, min(CHUNK, self.buffer_size // 4))

    def _begin(self) -> list[Any]:
        """Starts reading the next window where the upstream stands; returns its list."""
        self._items, self._read, self._ended = [], [], False
        self._next_start = self.upstream._snapshot()
        return self._items

    def _read_up_to(self, items: list[Any], size: int) -> None:
        """Reads into the next window, ``items``, until it holds ``size`` items or the
        upstream ends."""
        if self._probe is None:
            read_into(items, self.upstream, size)
        else:
            self._read_asking(items, self._probe, size)
        self._ended = len(items) < size

    def _fill(self) -> None:
        """Makes the next window the one going out, reading what is left of it first."""
        items = self._begin() if self._items is None else self._items
        if not self._ended:
            self._read_up_to(items, self.buffer_size)
        if not items:
            raise StopIteration
        order = _rng.rng(self.seed, _rng.SHUFFLE, self._next).permutation(len(items)).tolist()
        self._buf = [items[i] for i in order]
        if self._probe is not None:
            self._copies = first_out([self._read[i] for i in order])
        self._buf[:self._skip] = [None] * self._skip
        self._pos, self._skip = self._skip, 0
        self._window, self._start, self._next = self._next, self._next_start, self._next + 1
        self._due_after(self._begin())  # the upstream stands at the next window's start

    def _read_asking(self, items: list[Any], probe: Callable[[], tuple[int, bool]],
                     size: int) -> None:
        # read_into's loop, asking the upstream about each item as it comes.
        read, upstream = self._read, self.upstream
        while len(items) < size:
            try:
                item = next(upstream)
            except StopIteration:
                break
            items.append(item)
            read.append(probe())

    def copies_of(self) -> Callable[[], tuple[int, bool]] | None:
        """Which example an item is a copy of, and whether it is the first to leave.

        Of an example whose first copy entered this window, the copy that leaves the
        window first is the first; copies of an example whose first copy entered an
        earlier window never are (that window was emptied before this one).

        Example:
            >>> import dataecho
            >>> stage = Shuffle(dataecho.Echo(["a", "b"], factor=2), 4, seed=4)
            >>> copy_of = stage.copies_of()
            >>> [(item, *copy_of()) for item in stage]
            [('a', 1, True), ('b', 2, True), ('b', 2, False), ('a', 1, False)]
        """
        probe = self.upstream.copies_of()
        if probe is None:
            return None
        self._probe = probe
        return lambda: self._copies[self._pos - 1]

    def _config(self) -> dict[str, Any]:
        return {"buffer_size": self.buffer_size, "seed": self.seed}

    def _snapshot(self) -> Any:
        # "ahead": the items of the next window read, which a restore reads again so
        # that the upstream, and the counts it keeps, stand where they stood.
        ahead = 0 if self._items is None else len(self._items)
        if 0 < self._pos < len(self._buf):
            return (self._start, self._window, self._pos, ahead)
        # Between windows (or before the first item of a restore's window): the next
        # window from its start, skipping what a restore already emitted of it.
        start = self.upstream._snapshot() if self._items is None else self._next_start
        return (start, self._next, self._skip, ahead)

    def _state(self, token: Any) -> State:
        return {"upstream": self.upstream._expand(token[0]), "window": token[1],
                "skip": token[2], "ahead": token[3]}

    def _set_state(self, state: Mapping[str, Any]) -> None:
        upstream = state_mapping(state, "upstream", "Shuffle")
        window = state_int(state, "window", "Shuffle", maximum=2**63 - 1,
                           rule="windows read so far, each a count below 2**63")
        skip = state_int(state, "skip", "Shuffle", maximum=self.buffer_size - 1,
                         rule=f"items of the window already emitted, fewer than "
                         f"buffer_size={self.buffer_size}")
        # Absent in states saved before windows were read ahead: nothing was.
        ahead = 0 if "ahead" not in state else state_int(
            state, "ahead", "Shuffle", maximum=self.buffer_size,
            rule=f"items of the next window read, at most buffer_size={self.buffer_size}")
        self.upstream.load_state_dict(upstream)
        self._due = self._stop = 0  # a restore cut short by an error: read at the next call
        self._buf, self._pos, self._window, self._next = [], 0, window, window
        self._items, self._skip, self._read, self._owed = None, skip, [], ahead
        if self._skip:
            # Re-reads the window from its start state and skips what was emitted; if the
            # upstream raises meanwhile, the next calls finish the read, the skip and
            # the read-ahead.
            self._fill()
        items = self._begin() if self._items is None else self._items
        self._read_up_to(items, ahead)
        self._owed = 0
        self._due_after(items)
        self._stop = min(len(self._buf), self._due)


def first_out(copies: list[tuple[int, bool]]) -> list[tuple[int, bool]]:
    """``copies`` (example, first in) of a window's items in their order out: first out.

    Example:
        >>> first_out([(2, False), (3, False), (2, True), (3, True), (4, False)])
        [(2, True), (3, True), (2, False), (3, False), (4, False)]
    """
    new = {example for example, first in copies if first}
    out = []
    for example, _ in copies:
        first = example in new
        if first:
            new.discard(example)
        out.append((example, first))
    return out


def window_of(examples: int, factor: float) -> int:
    """Items in a shuffle window after an echo that holds ``examples`` distinct examples.

    An echo of factor ``e`` puts ``e`` copies of each example into the window, so a
    window of ``n`` items holds only ``n / e`` examples; the default windows grow with
    the factor instead. Measured in the wall-clock benchmark at ``e = 4``: a window of
    1,280 items (320 examples) needed 1,600 steps to the target on each of three
    seeds, one of 5,120 (1,280 examples) 1,100-1,500, the baseline 1,100-1,200
    (``benchmarks/results/wallclock-public.md`` and ``wallclock-window.md``).

    The window is at most :data:`MAX_WINDOW` items: the buffer is filled before its first
    item comes out and holds every item, so ``factor=1e9`` would otherwise wait for
    10**12 items. Beyond it a window holds fewer than ``examples`` examples; pass a
    ``buffer_size`` for a larger one.

    Example:
        >>> window_of(1000, 1.0), window_of(1000, 2.5), window_of(1280, 4.0)
        (1000, 2500, 5120)
        >>> window_of(1000, 1e9) == MAX_WINDOW
        True
    """
    return max(1, min(MAX_WINDOW, math.ceil(examples * factor)))
