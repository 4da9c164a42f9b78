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
    function of ``(seed, w)``. Memory: ``buffer_size`` items.

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
        self._buf: list[Any] = []
        self._pos = 0
        self._window = 0  # index of the window in _buf, or of the next one when drained
        self._start: Any = None  # upstream snapshot from when the window in _buf began
        self._items: list[Any] | None = None  # the window being read, kept if upstream raises
        self._skip = 0  # items of that window a restore already emitted
        self._probe: Callable[[], tuple[int, bool]] | None = None  # upstream's copies_of()
        self._read: list[tuple[int, bool]] = []  # its answers for _items, in read order
        self._copies: list[tuple[int, bool]] = []  # this stage's answers for _buf

    def __next__(self) -> T:
        if self._pos >= len(self._buf):
            self._fill()
        item = self._buf[self._pos]
        self._buf[self._pos] = None  # drop our reference early: items can be large
        self._pos += 1
        return item  # type: ignore[no-any-return]

    def _fill(self) -> None:
        if self._items is None:
            if self._buf:
                self._window += 1
            self._buf, self._pos = [], 0
            self._start, self._items, self._read = self.upstream._snapshot(), [], []
        if self._probe is None:
            items = read_into(self._items, self.upstream, self.buffer_size)
        else:
            items = self._read_asking(self._items, self._probe)
        self._items = None
        if not items:
            raise StopIteration
        order = _rng.rng(self.seed, _rng.SHUFFLE, self._window).permutation(len(items)).tolist()
        self._buf = [items[i] for i in order]
        if self._probe is not None:
            self._copies = first_out([self._read[i] for i in order])
        self._buf[:self._skip] = [None] * self._skip
        self._pos, self._skip = self._skip, 0

    def _read_asking(self, items: list[Any], probe: Callable[[], tuple[int, bool]]) -> list[Any]:
        # read_into's loop, asking the upstream about each item as it comes.
        read, upstream = self._read, self.upstream
        while len(items) < self.buffer_size:
            try:
                item = next(upstream)
            except StopIteration:
                break
            items.append(item)
            read.append(probe())
        return items

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
        if self._items is not None:  # an upstream error interrupted the window's read
            return (self._start, self._window, self._skip)
        if 0 < self._pos < len(self._buf):
            return (self._start, self._window, self._pos)
        window = self._window + 1 if self._buf else self._window
        return (self.upstream._snapshot(), window, 0)

    def _state(self, token: Any) -> State:
        return {"upstream": self.upstream._expand(token[0]), "window": token[1],
                "skip": token[2]}

    def _set_state(self, state: Mapping[str, Any]) -> None:
        upstream = state_mapping(state, "upstream", "Shuffle")
        window = state_int(state, "window", "Shuffle", maximum=2**63 - 1,
                           rule="windows read so far, each a count below 2**63")
        skip = state_int(state, "skip", "Shuffle", maximum=self.buffer_size - 1,
                         rule=f"items of the window already emitted, fewer than "
                         f"buffer_size={self.buffer_size}")
        self.upstream.load_state_dict(upstream)
        self._buf, self._pos, self._window = [], 0, window
        self._items, self._skip, self._read = None, skip, []
        if self._skip:
            # Re-reads the window from its start state and skips what was emitted; if the
            # upstream raises meanwhile, the next call finishes the read and the skip.
            self._fill()


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
