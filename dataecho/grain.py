"""Echoing in a Grain pipeline (JAX): an ``IterDataset`` that repeats each element.

:class:`EchoIterDataset` is a one-to-many transformation in the shape of Grain's own
flat map: its iterator checkpoints the parent's state from before the element being
echoed plus how many of its copies were emitted, and restoring re-reads that element.
Put it where the expensive work ends::

    ds = (grain.MapDataset.source(examples)[host::hosts]  # per-host slice first
          .to_iter_dataset()
          .pipe(EchoIterDataset, factor=2, seed=0)  # before the augmentation
          .random_map(augment, seed=1)  # each copy augmented anew
          .batch(64)
          .mp_prefetch(grain.MultiprocessingOptions(num_workers=2)))

Everything before ``mp_prefetch`` runs in its worker processes, the echo included, so
the counts live in each worker's state; :func:`stats` sums them from the training
process's iterator. This module imports Grain, not JAX.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, TypeVar

import grain
import numpy as np

from ._checks import check_seed
from .echo import copies_at
from .factor import fixed_factor
from .stats import EchoStats

T = TypeVar("T")

# Fractional draws are looked up 1024 stream positions at a time: one numpy call per
# element would cost ~1 µs, a block ~20 ns per element.
_BLOCK = 1024

# The keys of the echo iterator's state that stats() recognises in a nested pipeline
# state: Grain's flat-map keys plus the two counters.
_COUNT_KEYS = ("next_index_in_buffer", "fresh_items", "emitted_items")


class EchoIterDataset(grain.IterDataset[T]):  # type: ignore[misc]
    """Yields every element of ``parent`` ``factor`` times in a row.

    Where it stands decides the paper's variant: before ``random_map`` each copy is
    augmented anew (Grain seeds ``random_map`` per output element), after it the copies
    are identical, after ``batch`` it echoes batches. Copies come out adjacent; a
    ``grain.experimental.WindowShuffleIterDataset`` after it spreads them apart, which
    the paper found improves training, and checkpoints exactly too.

    A fractional ``factor`` gives ``floor(factor)`` copies plus one more with
    probability ``factor - floor(factor)``, drawn as ``dataecho.Echo`` draws them
    (:func:`dataecho.echo.copies_at`) at the element's key ``i = w + k * W``: ``k`` is
    the element's position in this iterator's stream, ``w`` and ``W`` the worker index
    and count under ``mp_prefetch`` (0 and 1 without). A worker reads the elements
    ``w, w + W, ...`` of the stream before ``mp_prefetch``, so without a ``filter``
    before the echo ``i`` is the element's position in that stream and the copies are
    the same for any number of workers; with one the draws are still deterministic.
    Per-host sharding (``ds[host::hosts]`` or ``grain.sharding.ShardOptions``) belongs
    before the echo, so each host echoes its own examples; with the same ``seed`` and
    equal shard lengths every host emits the same number of elements (same draws at
    the same positions), so SPMD steps stay aligned.

    Args:
        parent: a ``grain.IterDataset`` (``MapDataset.to_iter_dataset()``). A
            ``MapDataset`` is refused: its random access would re-read and re-decode
            the parent for every copy, which is not echoing.
        factor: copies per element, a real number >= 1; 1 is a pass-through.
        seed: seed of the fractional draws, an int in ``[0, 2**63)``.

    Example:
        >>> ds = grain.MapDataset.range(3).to_iter_dataset()
        >>> list(ds.pipe(EchoIterDataset, factor=2))
        [0, 0, 1, 1, 2, 2]
        >>> it = iter(grain.MapDataset.range(1000).to_iter_dataset()
        ...           .pipe(EchoIterDataset, factor=1.5, seed=1))
        >>> n = sum(1 for _ in it)
        >>> 1400 < n < 1600, it.stats().fresh_examples
        (True, 1000)
    """

    def __init__(self, parent: grain.IterDataset[T], factor: float, *,
                 seed: int = 0) -> None:
        if isinstance(parent, grain.MapDataset):
            raise TypeError(
                "parent must be a grain.IterDataset, got a grain.MapDataset; call "
                ".to_iter_dataset() first: random access would re-read the element for "
                "every copy, which is not echoing")
        if not isinstance(parent, grain.IterDataset):
            raise TypeError(
                f"parent must be a grain.IterDataset, got {type(parent).__name__}; build "
                "one with grain.MapDataset.source(data).to_iter_dataset()")
        self.factor = fixed_factor(
            factor, adaptive="dataecho.AdaptiveEcho(iter(ds)) around the Grain iterator "
            "in the training loop (a Grain pipeline is deterministic and runs ahead in its "
            "workers, while adaptive echoing decides from timing)")
        self.seed = check_seed(seed)
        super().__init__(parent)

    def __iter__(self) -> EchoIterator[T]:
        return EchoIterator(self._parent.__iter__(), self.factor, self.seed)

    def __str__(self) -> str:
        return f"EchoIterDataset(factor={self.factor:g}, seed={self.seed})"


class EchoIterator(grain.DatasetIterator[T]):  # type: ignore[misc]
    """The iterator of :class:`EchoIterDataset`; ``stats()`` gives its counts.

    Its state is ``{"parent": ..., "next_index_in_buffer": k, "fresh_items": ...,
    "emitted_items": ...}``: the parent's state from before the element in progress
    and the ``k`` copies of it already emitted (``k = 0`` and the parent's current
    state between elements), plus the counts, so they are exact after a restore.
    Restoring reads no data: the next ``next()`` re-reads the element in progress.

    Example:
        >>> it = iter(grain.MapDataset.range(2).to_iter_dataset()
        ...           .pipe(EchoIterDataset, factor=3))
        >>> _ = next(it); state = it.get_state(); state["next_index_in_buffer"]
        1
        >>> it.set_state(state); list(it)
        [0, 0, 1, 1, 1]
    """

    def __init__(self, parent: grain.DatasetIterator[T], factor: float, seed: int) -> None:
        super().__init__(parent)
        self._factor, self._seed = factor, seed
        self._base = math.floor(factor)
        self._frac = factor - self._base
        self._worker: tuple[int, int] | None = None  # (index, count), read at first use
        self._block_id = -1
        self._block: list[int] = []
        self._item: Any = None
        self._before: Any = None  # parent state before the element in progress
        self._done = 0  # copies of it emitted
        self._left = 0  # copies of it still to emit
        self._reread = False  # a restore left the element to be read again
        self._fresh = self._emitted = 0

    def __next__(self) -> T:
        if self._left:
            if self._reread:
                self._item, self._reread = next(self._parent), False
            self._left -= 1
            self._done += 1
            self._emitted += 1
            return self._item  # type: ignore[no-any-return]
        n = self._copies(self._fresh)
        # The state before the read is needed only while copies are pending (it is
        # not free: it walks the whole parent pipeline).
        before = self._parent.get_state() if n > 1 else None
        item = next(self._parent)
        self._item, self._before = item, before
        self._done, self._left = 1, n - 1
        self._fresh += 1
        self._emitted += 1
        return item  # type: ignore[no-any-return]

    def _copies(self, position: int) -> int:
        if not self._frac:
            return self._base
        block, offset = divmod(position, _BLOCK)
        if block != self._block_id:
            if self._worker is None:
                # Set by mp_prefetch on the pipeline's shared context before the first
                # next(); Grain's own random_map keys its seeds by the same two numbers.
                mp = getattr(getattr(self, "_ctx", None), "mp_context", None)
                self._worker = (int(getattr(mp, "process_index", 0)),
                                int(getattr(mp, "process_count", 1)))
            index, count = self._worker
            positions = np.arange(block * _BLOCK, (block + 1) * _BLOCK, dtype=np.int64)
            self._block = copies_at(self._factor, self._seed, index + positions * count).tolist()
            self._block_id = block
        return self._block[offset]

    def get_state(self) -> dict[str, Any]:
        pending = self._left > 0
        return {"parent": self._before if pending else self._parent.get_state(),
                "next_index_in_buffer": self._done if pending else 0,
                "fresh_items": self._fresh, "emitted_items": self._emitted}

    def set_state(self, state: Mapping[str, Any]) -> None:
        self._parent.set_state(state["parent"])
        self._fresh, self._emitted = int(state["fresh_items"]), int(state["emitted_items"])
        done = int(state["next_index_in_buffer"])
        self._item = None
        if done:
            # The element in progress is the one read at position fresh - 1.
            self._before, self._done = state["parent"], done
            self._left = self._copies(self._fresh - 1) - done
            self._reread = True
        else:
            self._before, self._done, self._left, self._reread = None, 0, 0, False

    def stats(self) -> EchoStats:
        """Elements read from the parent and emitted so far (each counts as one example).

        Example:
            >>> it = iter(grain.MapDataset.range(4).to_iter_dataset()
            ...           .pipe(EchoIterDataset, factor=2))
            >>> _ = list(it); str(it.stats())
            'fresh 4 examples, emitted 8 (factor 2.000)'
        """
        return EchoStats(self._fresh, self._emitted, self._fresh, self._emitted, None)

    def __str__(self) -> str:
        return f"EchoIterator(factor={self._factor:g}, seed={self._seed})"


def stats(iterator: Any) -> EchoStats:
    """Sums the echo counts in a Grain iterator's state (or a state dict).

    Under ``mp_prefetch`` each worker's echo stage counts what it read and emitted,
    and the training process's iterator reports, per worker, the state that came with
    the last element it handed out: the sum is exact for the elements consumed so far
    (a ``batch`` after the echo counts the examples of the batches handed out; those a
    ``drop_remainder`` dropped at the end are not counted). A stage between the echo
    and the training loop that checkpoints the echo's state from an earlier point (a
    window shuffle keeps it from the start of its window) reports the counts of that
    point, which lag by at most its window. With two echo stages in one chain, fresh
    counts come from the first, emitted from the last.

    Raises:
        ValueError: the state holds no :class:`EchoIterDataset`.

    Example:
        >>> it = iter(grain.MapDataset.range(4).to_iter_dataset()
        ...           .pipe(EchoIterDataset, factor=2).batch(4))
        >>> _ = next(it); str(stats(it))
        'fresh 2 examples, emitted 4 (factor 2.000)'
    """
    state = iterator.get_state() if hasattr(iterator, "get_state") else iterator
    found = _find(state)
    if found is None:
        raise ValueError(
            f"iterator holds no EchoIterDataset: its state {str(state)[:200]} has no "
            f"echo counts {_COUNT_KEYS}; pass the iterator of a pipeline that includes "
            ".pipe(dataecho.grain.EchoIterDataset, factor=...)")
    return EchoStats(found[0], found[1], found[0], found[1], None)


def _find(node: Any) -> tuple[int, int] | None:
    """(fresh, emitted) summed over the echo chains in a nested state, or None."""
    if isinstance(node, Mapping):
        if all(key in node for key in (*_COUNT_KEYS, "parent")):
            inner = _find(node["parent"])
            fresh = inner[0] if inner is not None else int(node["fresh_items"])
            return fresh, int(node["emitted_items"])
        children = list(node.values())
    elif isinstance(node, list | tuple):
        children = list(node)
    else:
        return None
    found = [f for f in map(_find, children) if f is not None]
    if not found:
        return None
    return sum(f[0] for f in found), sum(f[1] for f in found)
