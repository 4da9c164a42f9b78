"""Adapters that turn any iterable into a checkpointable stage.

Stages accept plain iterables (lists, generators, DataLoaders) as their upstream. An
object with its own ``state_dict``/``load_state_dict`` (a torchdata
``StatefulDataLoader``, a torchdata node, another library's stateful iterator) keeps
its own checkpoint; anything else is restored by re-iterating it and skipping what was
already consumed, which is exact for deterministic iterables.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from itertools import islice
from typing import Any, TypeVar

from ._checks import check_iterable
from .stage import Stage, State

T = TypeVar("T")


class IterableSource(Stage[T]):
    """Reads a plain iterable; restores by re-iterating and skipping consumed items.

    Args:
        iterable: anything ``iter()`` accepts. Restoring into a new pipeline needs a
            re-iterable (a list, a DataLoader) or a fresh, identical iterator.

    Example:
        >>> stage = IterableSource([1, 2, 3])
        >>> next(stage), stage.state_dict()["consumed"]
        (1, 1)
    """

    def __init__(self, iterable: Iterable[T]) -> None:
        self.iterable = check_iterable(iterable)
        self._it: Iterator[T] | None = None
        self.items_read = 0

    def __next__(self) -> T:
        if self._it is None:
            self._it = iter(self.iterable)
        item = next(self._it)
        self.items_read += 1
        return item

    def _config(self) -> dict[str, Any]:
        return {}

    def _get_state(self) -> State:
        return {"consumed": self.items_read}

    def _snapshot(self) -> Any:
        return self.items_read

    def _expand(self, token: Any) -> State:
        return {"stage": "IterableSource", "version": self.VERSION, "config": {},
                "consumed": token}

    def _set_state(self, state: Mapping[str, Any]) -> None:
        consumed = int(state["consumed"])
        it = iter(self.iterable)
        if it is self.iterable and self._it is not None:
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
        self._it, self.items_read = it, consumed

    def _repr_args(self) -> dict[str, Any]:
        return {}

    def __repr__(self) -> str:
        return f"<{type(self.iterable).__name__}>"


class StatefulSource(Stage[T]):
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

    def __init__(self, iterable: Any) -> None:
        self.iterable: Any = check_iterable(iterable)
        self._it: Iterator[T] | None = None
        self.items_read = 0

    def __next__(self) -> T:
        if self._it is None:
            self._it = iter(self.iterable)
        item = next(self._it)
        self.items_read += 1
        return item

    def _config(self) -> dict[str, Any]:
        return {}

    def _get_state(self) -> State:
        return {"upstream": self.iterable.state_dict(), "read": self.items_read}

    def _set_state(self, state: Mapping[str, Any]) -> None:
        self.iterable.load_state_dict(state["upstream"])
        self._it, self.items_read = None, int(state["read"])

    def __repr__(self) -> str:
        return f"<{type(self.iterable).__name__}>"


def as_stage(upstream: object, name: str = "upstream") -> Stage[Any]:
    """Returns ``upstream`` as a :class:`Stage`, wrapping plain iterables.

    Example:
        >>> as_stage([1, 2])
        <list>
    """
    if isinstance(upstream, Stage):
        return upstream
    check_iterable(upstream, name)
    if callable(getattr(upstream, "state_dict", None)) and callable(
        getattr(upstream, "load_state_dict", None)
    ):
        return StatefulSource(upstream)
    return IterableSource(upstream)  # type: ignore[arg-type]
