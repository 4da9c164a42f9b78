"""The echo stage: repeat each upstream item ``factor`` times."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

import numpy as np

from . import _rng
from ._checks import (
    check_count,
    check_factor,
    check_positive_int,
    check_seed,
    check_shard,
    check_size,
    state_int,
    state_mapping,
)
from .factor import fixed_factor
from .readers import as_stage
from .sizes import batch_len, find_batcher, is_batched
from .stage import Stage, State

T = TypeVar("T")

# Fractional draws are made 4096 at a time: one numpy call per item would cost ~1 µs,
# a block costs ~15 ns per item.
_BLOCK = 4096


class Echo(Stage[T]):
    """Yields every upstream item ``factor`` times in a row.

    Where the stage stands decides the paper's variant: before the augmentation
    ``Map`` (copies are augmented independently), after it (identical copies), or
    after ``Batch`` (batch echoing). Copies come out adjacent; a ``Shuffle`` after
    this stage spreads them apart, which the paper found improves training.

    A fractional ``factor`` gives ``floor(factor)`` copies plus one more with
    probability ``factor - floor(factor)``, drawn per item from a generator keyed by
    ``(seed, item index)``: the mean converges to ``factor`` and reruns are identical.

    Args:
        upstream: any iterable; stages and stateful loaders keep their own checkpoint,
            other iterables are restored by re-iterating them.
        factor: copies per item, a real number >= 1; 1 is a pass-through.
        seed: seed of the fractional draws.
        size: examples in an item, for accounting. By default 1, or the batch's size
            when a ``Batch`` is upstream (measured by :func:`dataecho.sizes.batch_len`
            when a stage between reads ahead); pass it for other batch layouts.
        shard: ``(index, count)`` when the upstream is one of ``count`` readers that
            share a stream round-robin (items ``index, index + count, ...``, as Grain's
            ``mp_prefetch`` workers read): the ``k``-th item read draws its copies as item
            ``index + k * count`` of the whole stream, so the copies do not depend on how
            many readers there are.

    Example:
        >>> list(Echo(["a", "b"], factor=3))
        ['a', 'a', 'a', 'b', 'b', 'b']
        >>> list(Echo(["a", "b", "c", "d"], factor=1.5, seed=1))
        ['a', 'a', 'b', 'b', 'c', 'c', 'd']
    """

    upstream: Stage[Any]

    def __init__(
        self,
        upstream: Iterable[T],
        factor: float,
        *,
        seed: int = 0,
        size: Callable[[T], int] | None = None,
        shard: tuple[int, int] = (0, 1),
    ) -> None:
        size = check_size(size)
        self._first, self._step = check_shard(*shard)
        self.upstream = as_stage(upstream)
        self.factor = fixed_factor(
            factor, adaptive="dataecho.AdaptiveEcho(upstream, max_factor=...), or "
            "dataecho.pipeline(..., factor=dataecho.Auto()) for a whole pipeline")
        self.seed = check_seed(seed)
        self._base = math.floor(self.factor)
        self._frac = self.factor - self._base
        self._batcher = find_batcher(self.upstream) if size is None else None
        if size is None and self._batcher is None and is_batched(self.upstream):
            size = batch_len
        self._size_fn = size
        self._sized = size is not None or self._batcher is not None
        self._block_start = -_BLOCK  # the first position of the cached block: none yet
        self._block: list[int] = []
        self._item: Any = None
        self._before: Any = None  # upstream snapshot before the item being echoed
        self._left = 0  # copies of _item still to emit
        self._reread_at = -1  # _fresh while _item is one a restore owed (not a first copy)
        self._owed = 0  # copies still to emit of an item a restore has not re-read yet
        self._size = 1  # examples in _item
        self._fresh = self._fresh_ex = self._planned = self._planned_ex = 0

    def __next__(self) -> T:
        # The hot path: ~6 attribute operations per copy, no calls but next().
        if self._left:
            self._left -= 1
            return self._item  # type: ignore[no-any-return]
        if self._owed:
            return self._reread()
        n = self.copies(self._fresh) if self._frac else self._base
        # The upstream state before the read is needed only while copies are pending.
        if n > 1:
            self._before = self.upstream._snapshot()
        item = self._item = next(self.upstream)
        self._left = n - 1
        if self._sized:
            size = self._size = self._item_size(item)
            self._fresh_ex += size
            self._planned_ex += n * size
        else:
            self._fresh_ex += 1
            self._planned_ex += n
        self._fresh += 1
        self._planned += n
        return item  # type: ignore[no-any-return]

    def _reread(self) -> T:
        # The item was counted when first read; an upstream error leaves the upstream
        # where the item starts, so the next call (or a checkpoint) re-reads it again.
        try:
            item = next(self.upstream)
        except BaseException:
            # Roll back only an upstream that moved (a batcher keeps a partial batch):
            # one that did not may be a one-shot iterator, which cannot be restored.
            if self.upstream._snapshot() != self._before:
                self.upstream.load_state_dict(self.upstream._expand(self._before))
            raise
        self._item, self._left, self._owed, self._reread_at = (
            item, self._owed - 1, 0, self._fresh)
        return item  # type: ignore[no-any-return]

    def copies(self, index: int) -> int:
        """Copies this stage makes of the item it reads ``index``-th (from 0).

        Example:
            >>> [Echo([], factor=1.5, seed=1).copies(k) for k in range(4)]
            [2, 2, 2, 1]
        """
        if not self._frac:
            return self._base
        position = self._first + index * self._step
        i = position - self._block_start
        if 0 <= i < _BLOCK:  # no divmod on the hot path: a cached block's position
            return self._block[i]
        block = position // _BLOCK
        self._block = _copies_block(self.factor, self.seed, block).tolist()
        self._block_start = block * _BLOCK
        return self._block[position - self._block_start]

    def _item_size(self, item: T) -> int:
        if self._size_fn is not None:
            return check_count(self._size_fn(item), item)
        if self._batcher is not None:
            return int(self._batcher.last_size)
        return 1

    def echo_counts(self) -> tuple[int, int, int, int]:
        """(fresh_examples, emitted_examples, fresh_items, emitted_items)."""
        # Called per example by EchoDataset's counters: no dict here.
        left = self._left + self._owed
        return (self._fresh_ex, self._planned_ex - left * self._size,
                self._fresh, self._planned - left)

    def copies_of(self) -> Callable[[], tuple[int, bool]]:
        """Tells which example the item just returned is a copy of, and if it is the first.

        The example's number counts this stage's fresh reads from 1. A copy a restore
        still owed is not the first: that one went out before the checkpoint.

        Example:
            >>> stage = Echo(["a", "b"], factor=2); copy_of = stage.copies_of()
            >>> [(item, *copy_of()) for item in stage]
            [('a', 1, True), ('a', 1, False), ('b', 2, True), ('b', 2, False)]
        """
        # Worked out when asked, so that a plain Echo's next() stores nothing for it.
        if self._frac:
            return lambda: (self._fresh, self._fresh != self._reread_at
                            and self._left == self.copies(self._fresh - 1) - 1)
        last = self._base - 1
        return lambda: (self._fresh, self._left == last and self._fresh != self._reread_at)

    @property
    def repeating(self) -> bool:
        """Whether the item just returned comes again: more of its copies follow.

        Example:
            >>> stage = Echo(["a"], factor=2)
            >>> _ = next(stage); stage.repeating
            True
        """
        return self._left > 0

    def _config(self) -> dict[str, Any]:
        shard = {"shard": [self._first, self._step]} if self._step > 1 else {}
        return {"factor": self.factor, "seed": self.seed, **shard}

    def _snapshot(self) -> Any:
        left = self._left + self._owed
        upstream = self._before if left else self.upstream._snapshot()
        return (upstream, left, self._size, self._fresh, self._fresh_ex, self._planned,
                self._planned_ex)

    def _state(self, token: Any) -> State:
        return {"upstream": self.upstream._expand(token[0]), "left": token[1],
                "size": token[2], "fresh": token[3], "fresh_examples": token[4],
                "planned": token[5], "planned_examples": token[6]}

    def _set_state(self, state: Mapping[str, Any]) -> None:
        name = type(self).__name__
        upstream = state_mapping(state, "upstream", name)
        owed = state_int(state, "left", name, maximum=math.ceil(self.factor) - 1,
                         rule=f"copies still owed of one item, at most ceil(factor) - 1 "
                         f"with factor={self.factor}")
        size = state_int(state, "size", name, rule="examples in the item being echoed")
        fresh = state_int(state, "fresh", name)
        planned = state_int(state, "planned", name, minimum=fresh,
                            rule="copies planned, at least one per fresh item")
        fresh_ex = state_int(state, "fresh_examples", name)
        planned_ex = state_int(state, "planned_examples", name, minimum=fresh_ex,
                               rule="examples planned, at least the fresh ones")
        _check_together(name, self.factor, owed=owed, fresh=fresh, planned=planned)
        self.upstream.load_state_dict(upstream)
        self._owed, self._size = owed, size
        self._fresh, self._fresh_ex, self._planned, self._planned_ex = (
            fresh, fresh_ex, planned, planned_ex)
        # The item being echoed is re-read by the next next(), not here: restoring reads
        # no data, and an upstream error there leaves this stage consistent.
        self._left, self._item, self._reread_at = 0, None, -1
        self._before = self.upstream._snapshot() if self._owed else None


def _check_together(name: str, factor: float, *, owed: int, fresh: int, planned: int) -> None:
    """Refuses counters that are each in range but cannot hold together.

    A restore would otherwise owe copies of an item never read, or count more copies
    than ``factor`` allows, and replay or skip examples.
    """
    if owed and not fresh:
        raise ValueError(
            f"state of {name} has left={owed} but fresh=0: copies are owed only of an item "
            "already read; the checkpoint is damaged or was taken from another pipeline; "
            "pass the dict saved from this one's checkpoint")
    most = math.ceil(factor) * fresh
    if planned > most:
        raise ValueError(
            f"state of {name} has planned={planned} copies of fresh={fresh} items, but with "
            f"factor={factor} at most ceil(factor) * fresh = {most} are planned; the "
            "checkpoint is damaged or was taken from another pipeline; pass the dict saved "
            "from this one's checkpoint")


def copies_for(factor: float, u: np.ndarray) -> np.ndarray:
    """Copies for uniform draws ``u`` in [0, 1): the rule of every fractional draw.

    ``floor(factor)`` copies, plus one where ``u < factor - floor(factor)``.

    Example:
        >>> copies_for(2.25, np.array([0.1, 0.5])).tolist()
        [3, 2]
    """
    base = math.floor(factor)
    return base + (u < factor - base).astype(np.int64)


def _copies_block(factor: float, seed: int, block: int) -> np.ndarray:
    return copies_for(factor, _rng.rng(seed, _rng.ECHO, block).random(_BLOCK))


def total_copies(factor: float, seed: int, n: int) -> int:
    """How many items an ``Echo(..., factor, seed=seed)`` emits for ``n`` upstream items.

    Exact, not an expectation: it replays the same per-item draws, so a loader's
    ``len()`` can count echoed steps before they happen.

    Example:
        >>> total_copies(1.5, 0, 1000) == len(list(Echo(range(1000), 1.5, seed=0)))
        True
    """
    factor = check_factor(factor)
    seed = check_seed(seed)
    n = check_positive_int(n, "n", minimum=0)
    if factor == math.floor(factor):
        return int(factor) * n
    return sum(int(_copies_block(factor, seed, block)[:n - block * _BLOCK].sum())
               for block in range(-(-n // _BLOCK)))


def copies_at(factor: float, seed: int, indices: np.ndarray) -> np.ndarray:
    """Copies an ``Echo(..., factor, seed=seed)`` makes of the items at ``indices``.

    The same per-item draws as the stage, looked up by position, so code that echoes
    items out of order (a distributed engine's workers, each with some rows) makes
    exactly the copies the stage would.

    Example:
        >>> copies_at(1.5, 0, np.arange(6)).tolist()
        [1, 2, 1, 2, 2, 2]
    """
    factor = check_factor(factor)
    seed = check_seed(seed)
    indices = np.asarray(indices)
    if not np.issubdtype(indices.dtype, np.integer) or (indices.size and indices.min() < 0):
        raise ValueError(
            f"indices must be non-negative integers (item positions), got dtype "
            f"{indices.dtype} with minimum {indices.min() if indices.size else None}; "
            "pass row numbers such as ray.data.range's 'id'")
    out = np.full(indices.shape, math.floor(factor), dtype=np.int64)
    if factor != math.floor(factor):
        blocks, offsets = np.divmod(indices.astype(np.int64), _BLOCK)
        for block in np.unique(blocks).tolist():
            mask = blocks == block
            out[mask] = _copies_block(factor, seed, block)[offsets[mask]]
    return out
