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

import atexit
import contextlib
import gc
import math
from collections.abc import Mapping
from typing import Any, TypeVar

from ._extras import needs

try:
    import grain
except ModuleNotFoundError as error:
    raise needs(error, "dataecho.grain", "grain", "grain") from None

from ._checks import check_seed, state_int, state_mapping, state_value
from .echo import Echo
from .factor import fixed_factor
from .stage import Stage, State
from .stats import EchoStats

T = TypeVar("T")

#: The ``"stage"`` of an echo iterator's state: how :func:`stats` tells it apart.
NAME = "EchoIterDataset"


def _release_at_exit() -> None:
    """Frees the shared memory of the batches Grain's iterators still hold at exit.

    Grain's iterators keep the last elements of a pass in reference cycles (the frames
    of the StopIteration that ended it), mp_prefetch's shared-memory batches among them.
    Left to the collection at interpreter shutdown, their ``__del__`` runs after the
    modules it needs are gone: an ``AttributeError`` traceback per batch, and "leaked
    shared_memory objects" warnings. Collected here, while the modules are intact, they
    are unlinked by Grain's deletion thread (mp_prefetch starts one), which a task put
    after them and waited for lets finish before the interpreter stops it.
    """
    gc.collect()
    try:
        from grain.multiprocessing import SharedMemoryArray
    except ImportError:  # another Grain: its own shutdown, then
        return
    pool = getattr(SharedMemoryArray, "_del_thread_pool", None)  # None when not started
    if pool is not None:
        # A pool already closed has nothing left to wait for.
        with contextlib.suppress(Exception):
            pool.apply(int)  # returns once the deletions queued before it are done


atexit.register(_release_at_exit)


class _Live(dict):  # type: ignore[type-arg]
    """The echo's counts in its state under ``"live"``: the numbers of the moment.

    Its items are the counts when the state was taken, so a state pickled later (under
    ``mp_prefetch`` a worker's queue pickles it in a thread, while the worker reads on)
    still carries those. A stage after the echo that keeps the echo's state from an
    earlier point and hands out a ``copy.deepcopy`` of it (Grain's window shuffle keeps
    the one from its window's start) gets the counts of the moment of the copy: the
    copy reads them from the echo. Pickled it is a plain dict of its numbers; JSON
    writes its numbers.
    """

    def __init__(self, echo: Echo[Any]) -> None:
        _, _, fresh, emitted = echo.echo_counts()
        super().__init__(fresh_items=fresh, emitted_items=emitted)
        self.echo = echo

    def __deepcopy__(self, memo: dict[int, Any]) -> _Live:
        return _Live(self.echo)

    def __copy__(self) -> _Live:
        return _Live(self.echo)

    def __reduce__(self) -> tuple[Any, ...]:
        return (dict, (dict(self),))


class EchoIterDataset(grain.IterDataset[T]):  # type: ignore[misc]
    """Yields every element of ``parent`` ``factor`` times in a row.

    Where it stands decides the paper's variant: before ``random_map`` each copy is
    augmented anew (Grain seeds ``random_map`` per output element), after it the copies
    are identical, after ``batch`` it echoes batches. Copies come out adjacent; a
    ``grain.experimental.WindowShuffleIterDataset`` after it spreads them apart, which
    the paper found improves training, and checkpoints exactly too.

    The echo is a ``dataecho.Echo(parent, factor, seed=seed, shard=(w, W))``, ``w`` and
    ``W`` being the worker index and count under ``mp_prefetch`` (0 and 1 without):
    worker ``w`` reads the elements ``w, w + W, ...``, so without a ``filter`` before
    the echo each element gets the fractional copies of its position in the stream,
    whatever the number of workers.
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

    The echo is a :class:`dataecho.Echo` over the parent iterator. Its state is Grain's
    flat-map shape: ``{"stage": "EchoIterDataset", "config": {"factor": ..., "seed":
    ...}, "parent": ..., "next_index_in_buffer": k, "fresh_items": ..., "emitted_items":
    ..., "live": {...}}``, the parent's state from before the element in progress and
    the ``k`` copies of it already emitted (``k = 0`` and the parent's current state
    between elements), plus the counts, so they are exact after a restore. ``"live"``
    holds the same two counts as they were when the state was taken, or, where a later
    stage keeps this state from an earlier point and hands out a deep copy of it, when
    that copy was made (:func:`stats` reads them); a restore does not read it.
    Restoring reads no data: the next ``next()`` re-reads the element in progress. A
    state taken with another factor or seed, or with counts this echo cannot reach, is
    refused.

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
        self._config: dict[str, Any] = {"factor": factor, "seed": seed}
        self._echo: Echo[T] | None = None  # built at first use, when the worker is known

    def _stage(self) -> Echo[T]:
        if self._echo is None:
            # Set by mp_prefetch on the pipeline's shared context before the first next();
            # Grain's own random_map keys its seeds by the same two numbers.
            mp = getattr(getattr(self, "_ctx", None), "mp_context", None)
            shard = (int(getattr(mp, "process_index", 0)), int(getattr(mp, "process_count", 1)))
            self._echo = Echo(_Parent(self._parent), **self._config, shard=shard)
        return self._echo

    def __next__(self) -> T:
        return next(self._echo or self._stage())

    def get_state(self) -> dict[str, Any]:
        echo = self._stage()
        state = echo.state_dict()
        fresh, left = state["fresh"], state["left"]
        return {"stage": NAME, "config": self._config, "parent": state["upstream"]["state"],
                "next_index_in_buffer": echo.copies(fresh - 1) - left if left else 0,
                "fresh_items": fresh, "emitted_items": state["planned"] - left,
                "live": _Live(echo)}

    def set_state(self, state: Mapping[str, Any]) -> None:
        if state_value(state, "config", NAME) != self._config:
            raise ValueError(
                f"state of {NAME} was taken with {state['config']!r}, but this one has "
                f"{self._config}: the pipeline differs from the one checkpointed; rebuild "
                "it with the saved factor and seed")
        parent = state_mapping(state, "parent", NAME)
        fresh = state_int(state, "fresh_items", NAME, rule="elements read from the parent")
        echo = self._stage()
        n = echo.copies(fresh - 1) if fresh else 1
        done = state_int(state, "next_index_in_buffer", NAME, maximum=n - 1,
                         rule=f"copies already emitted of the element in progress, fewer "
                         f"than the {n} it gets")
        whole = fresh - (done > 0)  # elements whose copies were all emitted
        low, high = whole * math.floor(echo.factor) + done, whole * math.ceil(echo.factor) + done
        emitted = state_int(state, "emitted_items", NAME, minimum=low, maximum=high,
                            rule=f"copies emitted of {fresh} elements at factor {echo.factor}")
        left = n - done if done else 0
        base = echo.state_dict()
        echo.load_state_dict({
            **base, "upstream": {**base["upstream"], "state": parent}, "left": left,
            "size": 1, "fresh": fresh, "fresh_examples": fresh, "planned": emitted + left,
            "planned_examples": emitted + left})

    def stats(self) -> EchoStats:
        """Elements read from the parent and emitted so far (each counts as one example).

        Example:
            >>> it = iter(grain.MapDataset.range(4).to_iter_dataset()
            ...           .pipe(EchoIterDataset, factor=2))
            >>> _ = list(it); str(it.stats())
            'fresh 4 examples, emitted 8 (factor 2.000)'
        """
        _, _, fresh, emitted = self._stage().echo_counts()
        return EchoStats.of_examples(fresh, emitted)

    def __str__(self) -> str:
        return "EchoIterator(factor={factor:g}, seed={seed})".format(**self._config)


class _Parent(Stage[Any]):
    """A Grain iterator under the stage protocol, so that a :class:`dataecho.Echo` wraps it."""

    def __init__(self, iterator: grain.DatasetIterator[Any]) -> None:
        self.iterator = iterator

    def __next__(self) -> Any:
        return next(self.iterator)

    def _config(self) -> dict[str, Any]:
        return {}

    def _snapshot(self) -> Any:
        return self.iterator.get_state()

    def _state(self, token: Any) -> State:
        return {"state": token}

    def _set_state(self, state: Mapping[str, Any]) -> None:
        self.iterator.set_state(state["state"])


def stats(iterator: Any) -> EchoStats:
    """Sums the echo counts in a Grain iterator's state (or a state dict).

    Each echo stage counts what it read and emitted, and its state carries those counts
    as they were when the state was taken (``"live"``, also inside a stage that keeps
    the echo's state from an earlier point, as a window shuffle does). Under
    ``mp_prefetch`` the training process's iterator holds, per worker, the state that
    came with the last element it handed out; the sum is what the workers' echoes had
    read and emitted when those elements left them. That is exact after a full pass.
    Mid-pass it leads the elements handed out by what each worker's stages after the
    echo held then: a window shuffle's window (``window_size`` copies) and the worker's
    output buffer (``per_worker_buffer_size`` elements, batches after a ``batch``);
    without those stages it is exact. Copies a ``batch(drop_remainder=True)`` dropped
    at the end were emitted, and are counted, except under ``mp_prefetch``: there a
    worker's last state leaves it with its last full batch, and nothing follows the
    remainder it drops (fewer than a batch per worker; Grain's iterator keeps that last
    state after the ``StopIteration``), so the counts are those of the copies in the
    batches handed out. With two echo stages in one chain, fresh
    counts come from the first, emitted from the last. An echo's state is the one
    whose ``"stage"`` is ``"EchoIterDataset"``.

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
            f"echo state (stage {NAME!r}); pass the iterator of a pipeline that includes "
            ".pipe(dataecho.grain.EchoIterDataset, factor=...)")
    return found


def _find(node: Any) -> EchoStats | None:
    """The counts summed over the echo chains in a nested state, or None."""
    if isinstance(node, Mapping) and node.get("stage") == NAME:
        inner = _find(node["parent"])
        live = node.get("live")
        counts = live if isinstance(live, Mapping) and set(live) >= _LIVE else node
        fresh = inner.fresh_examples if inner is not None else counts["fresh_items"]
        return EchoStats.of_examples(int(fresh), int(counts["emitted_items"]))
    children = (node.values() if isinstance(node, Mapping)
                else node if isinstance(node, list | tuple) else ())
    found = [f for f in map(_find, children) if f is not None]
    return sum(found[1:], found[0]) if found else None


_LIVE = {"fresh_items", "emitted_items"}
