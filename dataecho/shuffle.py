"""The shuffle stage: a windowed shuffle buffer that checkpoints without elements."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from itertools import islice
from typing import Any, TypeVar

from . import _rng
from ._checks import check_positive_int, check_seed
from .iterable import as_stage
from .stage import Stage, State

T = TypeVar("T")


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

    Args:
        upstream: any iterable.
        buffer_size: items per window, an int >= 1.
        seed: seed of the window permutations.

    Example:
        >>> sorted(Shuffle(range(5), buffer_size=5)) == list(range(5))
        True
    """

    upstream: Stage[Any]

    def __init__(self, upstream: Iterable[T], buffer_size: int, *, seed: int = 0) -> None:
        self.upstream = as_stage(upstream)
        self.buffer_size = check_positive_int(buffer_size, "buffer_size")
        self.seed = check_seed(seed)
        self._buf: list[Any] = []
        self._pos = 0
        self._window = 0  # index of the window in _buf, or of the next one when drained
        self._start: State | None = None  # upstream state when the window in _buf began

    def __next__(self) -> T:
        if self._pos >= len(self._buf):
            self._fill()
        item = self._buf[self._pos]
        self._buf[self._pos] = None  # drop our reference early: items can be large
        self._pos += 1
        return item  # type: ignore[no-any-return]

    def _fill(self) -> None:
        if self._buf:
            self._window += 1
        self._start = self.upstream.state_dict()
        items = list(islice(self.upstream, self.buffer_size))
        if not items:
            self._buf, self._pos = [], 0
            raise StopIteration
        order = _rng.rng(self.seed, _rng.SHUFFLE, self._window).permutation(len(items))
        self._buf = [items[i] for i in order.tolist()]
        self._pos = 0

    def _config(self) -> dict[str, Any]:
        return {"buffer_size": self.buffer_size, "seed": self.seed}

    def _get_state(self) -> State:
        if 0 < self._pos < len(self._buf):
            return {"upstream": self._start, "window": self._window, "skip": self._pos}
        window = self._window + 1 if self._buf else self._window
        return {"upstream": self.upstream.state_dict(), "window": window, "skip": 0}

    def _set_state(self, state: Mapping[str, Any]) -> None:
        self.upstream.load_state_dict(state["upstream"])
        self._buf, self._pos, self._window = [], 0, int(state["window"])
        skip = int(state["skip"])
        if skip:
            self._fill()  # re-reads the window from its start state
            self._buf[:skip] = [None] * skip
            self._pos = skip
