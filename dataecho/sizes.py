"""How many examples an item holds, for exact accounting of batches.

Echo stages count fresh and emitted *examples*; when their items are batches they need
each batch's size. A ``Batch`` stage knows the size of the batch it made last, which is
the next item's size only when nothing between it and the reader reorders or reads
ahead; otherwise the batch itself is measured.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from .map import Map
from .stage import Stage
from .stats import Batching, chain


def find_batcher(stage: Stage[Any] | None) -> Batching | None:
    """The batching stage whose ``last_size`` is the size of ``stage``'s next item, or None.

    Only ``Map`` stages may stand between: they pass one item per item, in order and
    without reading ahead. Any other stage (a ``Shuffle`` reading a window of batches,
    an earlier echo) can yield a batch made before the batcher's latest one, whose
    ``last_size`` then belongs to another batch.
    """
    while stage is not None:
        if isinstance(stage, Batching):
            return stage
        if not isinstance(stage, Map):
            return None
        stage = stage.upstream
    return None


def is_batched(stage: Stage[Any]) -> bool:
    """Whether a batching stage is upstream, so items are batches to be measured."""
    return any(isinstance(s, Batching) for s in chain(stage))


def one_per_item(item: object) -> int:
    """One example per item: the count of a stream of examples (not batches).

    Example:
        >>> one_per_item([1, 2, 3])
        1
    """
    return 1


def default_size(upstream: Stage[Any]) -> Callable[[Any], int]:
    """How AdaptiveEcho sizes items: the ``Batch``'s own count, else :func:`batch_len`.

    The ``Batch``'s count only when it is read directly or through ``Map`` stages
    (see :func:`find_batcher`).

    Example:
        >>> from dataecho import as_stage
        >>> default_size(as_stage([]))([[0.1, 0.2], [0.3, 0.4], [0.5, 0.6]])
        3
    """
    batcher = find_batcher(upstream)
    if batcher is not None:
        return lambda _: int(batcher.last_size)
    return batch_len


def batch_len(batch: object) -> int:
    """Examples in a batch: the leading dimension of its first array, else its length.

    A dict counts its first value (nested dicts too); a tuple is read as a tuple of
    fields (first field counted), a list as a list of examples unless it starts with an
    array or a list of arrays (``default_collate``'s list of fields, nested for nested
    samples); pass ``size=`` to a stage when a batch is laid out otherwise.

    Example:
        >>> import numpy as np
        >>> batch_len((np.zeros((8, 3)), np.zeros(8))), batch_len(["a", "b"]), batch_len(7)
        (8, 2, 1)
        >>> batch_len([[np.zeros((8, 5)), np.ones((8, 5))], np.zeros(8)])  # [[ids, mask], y]
        8
    """
    common = array_len(batch)
    if common is not None:
        return common
    while isinstance(batch, Mapping):  # nested dicts collate to nested dicts
        batch = next(iter(batch.values()), None)
    if isinstance(batch, tuple | list):  # before shape: a namedtuple's field may be one
        first = batch[0] if batch else None
        # default_collate makes lists of fields, nested for nested samples
        # ([[ids, mask], labels]); a list of anything else is a list of examples.
        nested = isinstance(first, list) and bool(first) and hasattr(first[0], "shape")
        if batch and (isinstance(batch, tuple) or hasattr(first, "shape") or nested):
            return batch_len(first)
        return len(batch)
    shape = getattr(batch, "shape", None)
    if shape is not None:
        return int(shape[0]) if len(shape) else 1
    return 1


# Whether a type's instances are arrays: a shape on the type, and no container (a
# namedtuple may have a field named shape). Known per type after its first batch.
_ARRAY_TYPES: dict[type, bool] = {}


def array_len(batch: Any) -> int | None:
    """The count of the common batches, found fast (a batch is measured per batch).

    The leading dimension when ``batch`` is an array, or a plain tuple, list or dict
    whose first field is one (where every rule of :func:`batch_len` and
    :func:`batch_size_of` counts that array); None for anything else.

    Example:
        >>> import numpy as np
        >>> array_len(np.zeros((4, 2))), array_len({"x": np.zeros(3)}), array_len([1])
        (4, 3, None)
    """
    first = batch
    if type(batch) is tuple or type(batch) is list:
        first = batch[0] if batch else None
    elif type(batch) is dict:
        first = next(iter(batch.values()), None)
    kind = type(first)
    array = _ARRAY_TYPES.get(kind)
    if array is None:
        array = _ARRAY_TYPES[kind] = (
            hasattr(kind, "shape") and not issubclass(kind, tuple | list | Mapping)
            and not dataclasses.is_dataclass(kind))
    shape = getattr(first, "shape", None) if array else None
    if shape is None:
        return None
    return int(shape[0]) if len(shape) else 1


def is_dataclass_instance(value: Any) -> bool:
    """Whether ``value`` is a dataclass instance (not a dataclass type)."""
    return dataclasses.is_dataclass(value) and not isinstance(value, type)


def batch_size_of(batch: Any) -> int:
    """Examples in a batch: :func:`dataecho.sizes.batch_len`, plus per-sample fields.

    As :func:`dataecho.sizes.batch_len` (the rule of the core stages): a tensor or
    array counts its first dimension; a dict its first value; a tuple (fields, named
    or not) its first field; a list its length (a list of samples, e.g. from
    ``collate_fn=lambda b: b``), unless its first element is a tensor or array
    (``default_collate``'s list of fields), whose first dimension counts. Added here:
    a dataclass counts as a dict of its fields, and a tuple, dict or dataclass whose
    fields are all lists or tuples of one length (per-sample fields, as the detection
    collate ``tuple(zip(*batch))`` makes) counts that length. Pass ``size=`` to
    :class:`dataecho.torch.EchoBatches` for batches laid out otherwise.

    Example:
        >>> import numpy as np
        >>> batch_size_of((np.zeros((32, 3)), np.zeros(32)))
        32
        >>> images, targets = (np.zeros((3, 8, 8)),) * 4, ({"boxes": None},) * 4
        >>> batch_size_of((images, targets)), batch_size_of([(np.zeros(3), 0)] * 5)
        (4, 5)
    """
    common = array_len(batch)
    if common is not None:
        return common
    if is_dataclass_instance(batch):
        batch = {f.name: getattr(batch, f.name, None) for f in dataclasses.fields(batch)}
    fields = (list(batch.values()) if isinstance(batch, Mapping)
              else batch if isinstance(batch, tuple) else None)
    if fields:
        lengths = {len(f) if isinstance(f, list | tuple) and not hasattr(f, "_fields")
                   else None for f in fields}
        if len(lengths) == 1:
            n = lengths.pop()
            if n:
                return n
    return batch_len(batch)
