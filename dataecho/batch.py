"""The batch stage and its default numpy collate."""

from __future__ import annotations

import numbers
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NoReturn

import numpy as np

from ._checks import check_bool, check_callable, check_positive_int, state_int, state_mapping
from .readers import as_stage
from .stage import Stage, State, read_into


def collate(items: Sequence[Any]) -> Any:
    """Stacks a list of examples field by field into numpy arrays.

    Arrays and numbers are stacked; tuples, lists and dicts are collated per field;
    anything else is returned as a list. Ragged examples (lists or tuples of other
    lengths, dicts with other keys, arrays of other shapes) raise ``ValueError``
    naming the field and both shapes: nothing is truncated or padded here. Pass
    ``Batch(..., collate=list)`` or a padding collate for variable-sized examples.

    Example:
        >>> import numpy as np
        >>> x, y = collate([(np.zeros(2), 0), (np.ones(2), 1)])
        >>> x.shape, y.tolist()
        ((2, 2), [0, 1])
    """
    return _collate(items, "example")


def _collate(items: Sequence[Any], field: str) -> Any:
    first = items[0]
    if isinstance(first, np.ndarray):
        try:
            return np.stack(items)
        except ValueError:
            _check_shapes(items, field)
            raise
    if isinstance(first, numbers.Number | np.generic):
        return np.asarray(items)
    if isinstance(first, tuple | list):
        kind = tuple if isinstance(first, tuple) else list
        for i, item in enumerate(items):
            if not isinstance(item, kind) or len(item) != len(first):
                _ragged(field, i, f"a {kind.__name__} of length {len(first)}", item)
        fields = [_collate([item[i] for item in items], f"{field}[{i}]")
                  for i in range(len(first))]
        return tuple(fields) if isinstance(first, tuple) else fields
    if isinstance(first, Mapping):
        keys = set(first)
        for i, item in enumerate(items):
            if not isinstance(item, Mapping) or set(item) != keys:
                _ragged(field, i, f"a dict with the keys {sorted(map(str, keys))}", item)
        return {k: _collate([item[k] for item in items], f"{field}[{k!r}]") for k in first}
    return list(items)


def _describe(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"an array of shape {value.shape}"
    if isinstance(value, tuple | list):
        return f"a {type(value).__name__} of length {len(value)}"
    if isinstance(value, Mapping):
        return f"a dict with the keys {sorted(map(str, value))}"
    return f"a {type(value).__name__}"


def _ragged(field: str, index: int, expected: str, got: Any) -> NoReturn:
    raise ValueError(
        f"collate: {field} is ragged: the batch's example 0 has {expected} there but "
        f"example {index} has {_describe(got)}; the default collate never truncates or "
        "pads: make the examples the same shape, or pass Batch(..., collate=list) or a "
        "padding collate function")


def _check_shapes(items: Sequence[Any], field: str) -> None:
    first = items[0]
    for i, item in enumerate(items):
        if not isinstance(item, np.ndarray) or item.shape != first.shape:
            _ragged(field, i, f"an array of shape {first.shape}", item)


class Batch(Stage[Any]):
    """Groups ``batch_size`` consecutive items and collates them.

    Put ``Echo`` after this stage for batch echoing (whole batches repeated), which
    saves the batching work too but repeats the same examples together; put it before
    for example echoing.

    Args:
        upstream: any iterable of examples.
        batch_size: examples per batch, an int >= 1.
        drop_last: drop a final partial batch instead of emitting it (the dropped
            examples were read, so they count as fresh but not as emitted; ``dropped``
            counts them).
        collate: turns a list of examples into a batch; default :func:`collate`
            (numpy). Pass ``list`` to keep the examples as a list.

    If the upstream raises (a transient read error), the examples of the batch read
    so far are kept and the next call goes on filling the same batch. A checkpoint
    taken meanwhile holds the upstream state from before the batch began, never the
    examples, so a restore re-reads them.

    Example:
        >>> [b.tolist() for b in Batch(range(5), batch_size=2)]
        [[0, 1], [2, 3], [4]]
    """

    upstream: Stage[Any]

    VERSION = 2  # 2: the state holds "dropped"

    def __init__(
        self,
        upstream: Iterable[Any],
        batch_size: int,
        *,
        drop_last: bool = False,
        collate: Callable[[list[Any]], Any] | None = None,
    ) -> None:
        self.upstream = as_stage(upstream)
        self.batch_size = check_positive_int(batch_size, "batch_size")
        self.drop_last = check_bool(drop_last, "drop_last")
        check_callable(collate, "collate", "collate(list_of_examples)",
                       "pass a function, or None for the default numpy collate")
        self.collate: Callable[[list[Any]], Any] = collate or _default_collate
        self.batches = 0  # batches emitted
        self.examples = 0  # examples in them
        self.dropped = 0  # examples read but dropped in a partial batch (drop_last)
        self.last_size = 0  # examples in the latest batch (read by a batch-echo stage)
        self._items: list[Any] | None = None  # the batch being filled, kept if upstream raises
        self._start: Any = None  # upstream snapshot from before that batch began

    def __next__(self) -> Any:
        if self._items is None:
            self._start, self._items = self.upstream._snapshot(), []
        items = read_into(self._items, self.upstream, self.batch_size)
        self._items = None
        if not items:
            raise StopIteration
        if self.drop_last and len(items) < self.batch_size:
            self.dropped += len(items)
            raise StopIteration
        batch = self.collate(items)
        self.batches += 1
        self.examples += len(items)
        self.last_size = len(items)
        return batch

    def batch_counts(self) -> tuple[int, int, int]:
        """(batches, examples, dropped): the :class:`~dataecho.stats.Batching` counts."""
        return self.batches, self.examples, self.dropped

    def _config(self) -> dict[str, Any]:
        name = getattr(self.collate, "__qualname__", type(self.collate).__name__)
        return {"batch_size": self.batch_size, "drop_last": self.drop_last,
                "collate": "default" if self.collate is _default_collate else name}

    def _snapshot(self) -> Any:
        upstream = self.upstream._snapshot() if self._items is None else self._start
        return (self.batches, self.examples, self.last_size, self.dropped, upstream)

    def _state(self, token: Any) -> State:
        return {"upstream": self.upstream._expand(token[4]), "batches": token[0],
                "examples": token[1], "last_size": token[2], "dropped": token[3]}

    def _set_state(self, state: Mapping[str, Any]) -> None:
        upstream = state_mapping(state, "upstream", "Batch")
        batches = state_int(state, "batches", "Batch", rule="batches emitted")
        examples = state_int(state, "examples", "Batch", minimum=batches,
                             maximum=batches * self.batch_size,
                             rule=f"examples in {batches} batches of at most "
                             f"batch_size={self.batch_size}")
        last_size = state_int(state, "last_size", "Batch", maximum=self.batch_size,
                              rule=f"examples in the latest batch, at most "
                              f"batch_size={self.batch_size}")
        dropped = state_int(state, "dropped", "Batch",
                            rule="examples of partial batches dropped")
        self.upstream.load_state_dict(upstream)
        self.batches, self.examples, self.last_size, self.dropped = (
            batches, examples, last_size, dropped)
        self._items = self._start = None

    def _repr_args(self) -> dict[str, Any]:
        return {k: v for k, v in self._cfg.items() if not (k == "collate" and v == "default")}


_default_collate = collate
