"""The in-place guard of batch echoing: echoed copies of a batch are the same object.

If a training step changes a tensor of its batch in place (``x.sub_(mean)``), the next
copy would be corrupted. :class:`Seen` notices that through tensors' version counters
before the copy is yielded; :func:`clone` makes the copies independent instead.

Limit: only writes that bump a tensor's version counter are seen. Writes that bypass
it (``batch.data.mul_(2)``, writes through ``batch.numpy()`` or another view shared
with numpy) change the next copy silently: pass ``clone=True`` when a step does that.
"""

from __future__ import annotations

import copy
import dataclasses
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import torch

from ..sizes import is_dataclass_instance


class Seen:
    """Tensor versions of the last ``size`` distinct batches yielded, by first use.

    Holding the batches keeps their ids from being reused by new objects; it keeps at
    most ``size`` batches alive, those the echo stage may still echo. Without ``clone``
    a batch holding a writable numpy array is refused: its changes cannot be seen.
    """

    def __init__(self, size: int, clone: bool = False) -> None:
        self.size, self.clone = size, clone
        self._versions: OrderedDict[int, tuple[Any, list[int]]] = OrderedDict()

    def check(self, batch: Any) -> None:
        """Raises if ``batch`` was yielded before and changed in place since; records it."""
        now = versions(batch, self.clone)
        entry = self._versions.get(id(batch))
        if entry is not None and entry[1] != now:
            raise RuntimeError(
                "the training step modified an echoed batch in place (a tensor's version "
                "counter changed), so its next copy would be corrupted; pass clone=True to "
                "EchoBatches, or avoid in-place ops on the input batch"
            )
        self._versions[id(batch)] = (batch, now)  # a known id keeps its place
        if len(self._versions) > self.size:
            self._versions.popitem(last=False)


def _leaves(batch: Any) -> Iterator[Any]:
    """The tensors and numpy arrays in a batch, through containers and dataclasses."""
    if isinstance(batch, torch.Tensor | np.ndarray):
        yield batch
    elif isinstance(batch, Mapping):
        for v in batch.values():
            yield from _leaves(v)
    elif isinstance(batch, list | tuple):
        for v in batch:
            yield from _leaves(v)
    elif is_dataclass_instance(batch):
        for field in dataclasses.fields(batch):
            yield from _leaves(getattr(batch, field.name, None))


def versions(batch: Any, copies: bool = False) -> list[int]:
    """The version counters of the tensors in ``batch`` (refuses writable arrays).

    Example:
        >>> versions((torch.zeros(2), [torch.ones(1)]))
        [0, 0]
    """
    found = []
    for leaf in _leaves(batch):
        if isinstance(leaf, torch.Tensor):
            if not leaf.is_inference():  # inference tensors keep no version counter
                found.append(leaf._version)
        elif leaf.flags.writeable and not copies:
            raise TypeError(
                "check_inplace=True cannot watch numpy arrays (numpy keeps no version "
                "counter), and an echoed batch is the same object as the batch before it: "
                f"got a batch holding a writable numpy array of shape {leaf.shape} with "
                "clone=False; pass clone=True to yield copies (safe with in-place steps), "
                "or check_inplace=False if the step never modifies its batch in place, or "
                "make the loader yield tensors (DataLoader's default collate does)"
            )
    return found


def clone(batch: Any) -> Any:
    """A copy of ``batch`` whose tensors and arrays are cloned, through containers.

    Example:
        >>> b = {"x": torch.zeros(2)}
        >>> clone(b)["x"] is b["x"]
        False
    """
    if isinstance(batch, torch.Tensor):
        return batch.clone()
    if isinstance(batch, np.ndarray):
        return batch.copy()
    if isinstance(batch, Mapping):
        return type(batch)({k: clone(v) for k, v in batch.items()})  # type: ignore[call-arg]
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):
        return type(batch)(*(clone(v) for v in batch))
    if isinstance(batch, list | tuple):
        return type(batch)(clone(v) for v in batch)
    if is_dataclass_instance(batch):
        # A shallow copy with cloned fields: no __init__ or __post_init__ runs, and
        # init=False fields are kept; object.__setattr__ also sets frozen fields.
        copied = copy.copy(batch)
        for field in dataclasses.fields(batch):
            if hasattr(batch, field.name):
                object.__setattr__(copied, field.name, clone(getattr(batch, field.name)))
        return copied
    return batch
