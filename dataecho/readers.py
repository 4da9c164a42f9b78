"""Readers that make any iterable a checkpointable stage (``as_stage``).

Stages accept plain iterables (lists, generators, DataLoaders) as their upstream. An
object with its own ``state_dict``/``load_state_dict`` (a torchdata
``StatefulDataLoader`` or ``nodes.Loader``, another library's stateful iterator) or a
``torchdata.nodes`` node (``state_dict``/``reset(state)``) keeps its own checkpoint;
anything else is restored by re-iterating it and skipping what was
already consumed, which is exact for deterministic iterables.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from itertools import islice
from types import GeneratorType
from typing import Any, TypeVar

from ._checks import check_iterable, state_bool, state_int, state_mapping, state_value
from .stage import Stage, State

T = TypeVar("T")


class _Reader(Stage[T]):
    """What both iterable sources share: lazy ``iter()``, counting, release on close."""

    def __init__(self, iterable: Any) -> None:
        self.iterable: Any = check_iterable(iterable)
        self._it: Iterator[T] | None = None
        self._closed = False
        self._opened = False  # an iterator was taken: a one-shot iterable is spent
        self.items_read = 0
        self._dead: BaseException | None = None  # the error that ended a generator upstream
        self.ended = False  # the iterator said StopIteration: this pass is read through

    def __next__(self) -> T:
        if self._it is None:
            if self._closed:
                raise StopIteration
            if self._dead is not None:
                raise RuntimeError(
                    f"the upstream generator ({type(self.iterable).__name__}) raised "
                    f"{type(self._dead).__name__}: {self._dead} and a generator cannot go "
                    "on after an error, so its remaining items cannot be read; restore the "
                    "checkpoint taken before the error, or make the upstream an iterator "
                    "that survives errors") from self._dead
            self._it, self._opened = iter(self.iterable), True
        try:
            item = next(self._it)
        except StopIteration:
            self.ended = True
            raise
        except BaseException as error:
            # A generator that raised is finished (KeyboardInterrupt and SystemExit
            # too): its next call would end the epoch as if the data were exhausted,
            # silently dropping the rest.
            if isinstance(self._it, GeneratorType):
                self._dead, self._it = error, None
            raise
        self.items_read += 1
        return item

    def close(self) -> None:
        """Drops the iterator, so a DataLoader's workers shut down now, not at GC."""
        self._it, self._closed = None, True

    def _config(self) -> dict[str, Any]:
        return {}

    def __repr__(self) -> str:
        return f"<{type(self.iterable).__name__}>"


class IterableSource(_Reader[T]):
    """Reads a plain iterable; restores by re-iterating and skipping consumed items.

    Args:
        iterable: anything ``iter()`` accepts. Restoring into a new pipeline needs a
            re-iterable (a list, a DataLoader) or a fresh, identical iterator.

    Example:
        >>> stage = IterableSource([1, 2, 3])
        >>> next(stage), stage.state_dict()["consumed"]
        (1, 1)
    """

    def _snapshot(self) -> Any:
        return self.items_read

    def _state(self, token: Any) -> State:
        return {"consumed": token}

    def _set_state(self, state: Mapping[str, Any]) -> None:
        consumed = state_int(state, "consumed", type(self).__name__, maximum=sys.maxsize,
                             rule="items of the iterable read so far, which a restore "
                             "skips: at most sys.maxsize")
        it = iter(self.iterable)
        if it is self.iterable and self._opened:
            raise ValueError(
                f"cannot restore: the upstream is a one-shot iterator "
                f"({type(self.iterable).__name__}) that was already read; rebuild the "
                "pipeline on a fresh iterator, or pass a re-iterable such as a list"
            )
        skipped = sum(1 for _ in islice(it, consumed))
        if skipped < consumed:
            raise ValueError(
                f"cannot restore: the checkpoint consumed {consumed} items but the upstream "
                f"now has only {skipped}; pass the same data the checkpoint was taken on"
            )
        self._it, self.items_read, self._closed, self._opened = it, consumed, False, True
        self._dead = None


class StatefulSource(_Reader[T]):
    """Reads an iterable that checkpoints itself (``state_dict``/``load_state_dict``).

    Example:
        >>> class Counter:
        ...     def __init__(self): self.n = 0
        ...     def __iter__(self):
        ...         while self.n < 3:
        ...             self.n += 1
        ...             yield self.n
        ...     def state_dict(self): return {"n": self.n}
        ...     def load_state_dict(self, s): self.n = s["n"]
        >>> stage = StatefulSource(Counter())
        >>> next(stage), stage.state_dict()["upstream"]
        (1, {'n': 1})
    """

    VERSION = 2  # 2: the state says whether the pass was read through ("ended")

    _loaded: State | None = None  # a state loaded and not read on from yet

    def _snapshot(self) -> State:
        # A stream read through may already report the start of its next pass (a
        # position reset when its iterator ends): restoring that would read the pass
        # again, so the end is recorded here and its state is not loaded. Before a
        # pass's first read, the stream may still report the end of its previous one
        # (Hugging Face's does, until its next iter()): restoring that would read
        # nothing, so the start is recorded as None, or the state loaded here.
        upstream = self.iterable.state_dict() if self._opened else self._loaded
        return {"upstream": upstream, "read": self.items_read, "ended": self.ended}

    def _set_state(self, state: Mapping[str, Any]) -> None:
        name = type(self).__name__
        read = state_int(state, "read", name, rule="items read so far")
        ended = state_bool(state, "ended", name)
        upstream = state_value(state, "upstream", name)
        if upstream is None and read:
            raise ValueError(
                f"state of {name} has upstream=None (the pass's start) but read={read}: "
                "the checkpoint is damaged; pass the dict saved from the checkpoint")
        if not ended and upstream is not None:
            self.iterable.load_state_dict(upstream)
        self._it, self.items_read, self._closed, self._dead = None, read, ended, None
        self.ended, self._opened = ended, False
        self._loaded = None if ended or upstream is None else dict(upstream)


class NodeSource(Stage[T]):
    """Reads a ``torchdata.nodes`` node; its own checkpoint travels in ours.

    A node checkpoints with ``state_dict()`` and restores with ``reset(state)``, not
    ``load_state_dict``, so it gets its own adapter. Duck-typed: the core never
    imports torch.

    Args:
        node: an object with ``reset(initial_state)``, ``state_dict()`` and
            ``__next__``, like ``torchdata.nodes.BaseNode``.

    Example:
        >>> class Count:  # the node protocol, without torch
        ...     def reset(self, initial_state=None):
        ...         self.n = (initial_state or {"n": 0})["n"]
        ...     def get_state(self): return {"n": self.n}
        ...     def state_dict(self): return self.get_state()
        ...     def __iter__(self): return self
        ...     def __next__(self):
        ...         self.n += 1
        ...         return self.n
        >>> node = Count(); node.reset()
        >>> stage = NodeSource(node)
        >>> next(stage), stage.state_dict()["node"]
        (1, {'n': 1})
    """

    def __init__(self, node: Any) -> None:
        if not is_node(node):
            raise TypeError(
                f"node must have reset(initial_state), get_state() and state_dict() like a "
                f"torchdata.nodes.BaseNode, got {type(node).__name__}; wrap other iterables "
                "with as_stage()")
        self.node: Any = node
        self.items_read = 0

    def __next__(self) -> T:
        item = next(self.node)
        self.items_read += 1
        return item  # type: ignore[no-any-return]

    def _config(self) -> dict[str, Any]:
        return {}

    def _snapshot(self) -> State:
        return {"node": self.node.state_dict(), "read": self.items_read}

    def _set_state(self, state: Mapping[str, Any]) -> None:
        read = state_int(state, "read", "NodeSource", rule="items read so far")
        self.node.reset(state_mapping(state, "node", "NodeSource"))
        self.items_read = read

    def __repr__(self) -> str:
        return f"<{type(self.node).__name__}>"


def is_node(obj: object) -> bool:
    """Whether ``obj`` follows the ``torchdata.nodes`` protocol (reset/get_state).

    Example:
        >>> is_node([1, 2])
        False
    """
    return all(callable(getattr(obj, name, None))
               for name in ("reset", "get_state", "state_dict", "__next__"))


def as_stage(upstream: object, name: str = "upstream") -> Stage[Any]:
    """Returns ``upstream`` as a :class:`Stage`, wrapping plain iterables.

    Example:
        >>> as_stage([1, 2])
        <list>
    """
    if isinstance(upstream, Stage):
        return upstream
    check_iterable(upstream, name)
    if is_node(upstream):
        return NodeSource(upstream)
    if checkpoints_itself(upstream):
        return StatefulSource(upstream)
    return IterableSource(upstream)


def checkpoints_itself(obj: object) -> bool:
    """Whether ``obj``'s own ``state_dict()``/``load_state_dict()`` can checkpoint it.

    Decided by a call that works, not by the names alone: ``state_dict()`` must answer a
    dict when called without arguments. LitData's and Mosaic's ``StreamingDataset``
    take the loader's counts (and LitData's answers only in the training process), and
    a loader that accelerate prepared raises unless it was made stateful: those are
    read as plain iterables, re-iterated and skipped on a restore.

    Example:
        >>> class Counts:  # a state_dict that needs the loader's counts
        ...     def __iter__(self): return iter(range(3))
        ...     def state_dict(self, num_samples): return {"n": num_samples}
        ...     def load_state_dict(self, state): pass
        >>> checkpoints_itself(Counts()), checkpoints_itself([1])
        (False, False)
    """
    if not (callable(getattr(obj, "state_dict", None))
            and callable(getattr(obj, "load_state_dict", None))):
        return False
    try:
        state = obj.state_dict()  # type: ignore[attr-defined]
    except Exception:  # any refusal means: not checkpointable this way
        return False
    return isinstance(state, Mapping)
