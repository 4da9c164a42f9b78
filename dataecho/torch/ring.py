"""The device memory of :class:`~dataecho.torch.DeviceEcho`: ``window`` preallocated slots.

A slot holds the tensors of one fresh batch, at the positions the first batch had them
(a tensor, the fields of a tuple, dict or dataclass, nested). A tensor whose first
dimension is the batch's size is kept in the ring; any other value (a label string, a
batch-level tensor) is carried through from the fresh batch. The ring's bytes are known
from the first batch, before anything is allocated, so a bound is checked first.
:class:`Shared` holds the ring for every epoch, with each slot's free event and the
parameters.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from ..factor import Auto
from ..sizes import batch_size_of, is_dataclass_instance
from .ordering import Ordering


def leaves(batch: Any) -> list[Any]:
    """Every value of ``batch`` that is no container, in a fixed order.

    Example:
        >>> leaves({"x": 1, "y": (2, [3])})
        [1, 2, 3]
    """
    if isinstance(batch, Mapping):
        return [leaf for value in batch.values() for leaf in leaves(value)]
    if isinstance(batch, list | tuple):
        return [leaf for value in batch for leaf in leaves(value)]
    if is_dataclass_instance(batch):
        return [leaf for f in dataclasses.fields(batch) for leaf in leaves(getattr(batch, f.name))]
    return [batch]


def rebuild(batch: Any, values: Iterator[Any]) -> Any:
    """``batch`` with its leaves (:func:`leaves`' order) replaced by ``values``.

    Example:
        >>> rebuild({"x": 1, "y": (2, [3])}, iter("abc"))
        {'x': 'a', 'y': ('b', ['c'])}
    """
    if isinstance(batch, Mapping):
        return type(batch)({k: rebuild(v, values) for k, v in batch.items()})  # type: ignore[call-arg]
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):
        return type(batch)(*(rebuild(v, values) for v in batch))
    if isinstance(batch, list | tuple):
        return type(batch)(rebuild(v, values) for v in batch)
    if is_dataclass_instance(batch):
        # As inplace.clone: no __init__ runs, and frozen fields are set too.
        out = copy.copy(batch)
        for f in dataclasses.fields(batch):
            object.__setattr__(out, f.name, rebuild(getattr(batch, f.name), values))
        return out
    return next(values)


class Ring:
    """``window`` slots for the row-wise tensors of a batch shaped like ``first``.

    Args:
        first: the loader's first batch; it fixes the slots' shapes, dtypes and rows.
        window: slots.
        device: where the slots live.
        max_bytes: the most bytes the slots may take; None: no bound.

    Raises:
        ValueError: the slots would take more than ``max_bytes``, or ``first`` holds no
            tensor with a row per example.

    Example:
        >>> ring = Ring({"x": torch.zeros(4, 3), "id": torch.arange(4)}, 2, torch.device("cpu"))
        >>> ring.rows, ring.nbytes  # 2 slots x 4 rows x (3 float32 + 1 int64)
        (4, 160)
    """

    def __init__(self, first: Any, window: int, device: torch.device,
                 max_bytes: int | None = None) -> None:
        self.rows = batch_size_of(first)
        self.window, self.device = window, device
        flat = leaves(first)
        self.where = [i for i, leaf in enumerate(flat) if _rowed(leaf, self.rows)]
        if not self.where:
            raise ValueError(
                f"loader's batches must hold a tensor with one row per example ({self.rows} "
                f"here), got a batch of {type(first).__name__} whose values are "
                f"{[type(leaf).__name__ for leaf in flat][:8]}; make the loader yield tensors "
                "(DataLoader's default collate does), or a tuple, dict or dataclass of them")
        shapes = [(flat[i].shape[1:], flat[i].dtype) for i in self.where]
        slot = sum(self.rows * math.prod(shape) * _itemsize(dtype) for shape, dtype in shapes)
        self.slot_bytes, self.nbytes = slot, slot * window
        if max_bytes is not None and self.nbytes > max_bytes:
            raise ValueError(
                f"max_bytes={max_bytes:,} is below the device ring's {self.nbytes:,} bytes: "
                f"window={window} slots of {slot:,} bytes (a batch of {self.rows} examples: "
                f"{', '.join(f'{tuple(s)} {d}' for s, d in shapes)} per example), and "
                f"max_bytes holds {max_bytes // slot}; pass a smaller window or smaller "
                f"batches, or max_bytes >= {self.nbytes:,}")
        self.slots = [torch.empty((window, self.rows, *shape), dtype=dtype, device=device)
                      for shape, dtype in shapes]
        self._flat = [s.view(window * self.rows, *s.shape[2:]) for s in self.slots]

    def check(self, batch: Any) -> tuple[list[Any], int]:
        """The batch's leaves and examples, after checking it fits a slot."""
        flat, n = leaves(batch), batch_size_of(batch)
        ok = 1 <= n <= self.rows and len(flat) > self.where[-1] and all(
            _rowed(flat[i], n) and flat[i].shape[1:] == s.shape[2:] and flat[i].dtype == s.dtype
            for i, s in zip(self.where, self.slots, strict=True))
        if not ok:
            want = [f"{tuple(s.shape[2:])} {s.dtype}" for s in self.slots]
            got = [f"{tuple(flat[i].shape)} {flat[i].dtype}" if i < len(flat)
                   and isinstance(flat[i], torch.Tensor) else type(flat[i]).__name__
                   if i < len(flat) else "missing" for i in self.where]
            raise ValueError(
                f"loader's batches must be fixed-size: every batch like the first ({self.rows} "
                f"examples of {want}), the last one possibly smaller; got {n} examples of "
                f"{got}; pad or drop the odd batch (DataLoader(drop_last=True)), or resize "
                "before the loader")
        return flat, n

    def put(self, slot: int, flat: list[Any], n: int) -> None:
        """Copies the batch's row-wise tensors into ``slot`` (asynchronously from pinned
        memory)."""
        for i, ring in zip(self.where, self.slots, strict=True):
            ring[slot, :n].copy_(flat[i], non_blocking=True)
            if flat[i].is_cuda:  # not reused before the copy (on this stream) has read it
                flat[i].record_stream(torch.cuda.current_stream(flat[i].device))

    def gather(self, index: torch.Tensor) -> list[torch.Tensor]:
        """New tensors holding the rows at ``index`` (``slot * rows + row``), per field."""
        return [flat.index_select(0, index) for flat in self._flat]

    def batch(self, carrier: list[Any], template: Any, gathered: list[torch.Tensor]) -> Any:
        """A batch like ``template``: gathered tensors where the ring holds them, the
        ``carrier``'s leaves elsewhere."""
        values = list(carrier)
        for i, tensor in zip(self.where, gathered, strict=True):
            values[i] = tensor
        return rebuild(template, iter(values))


def _rowed(leaf: Any, rows: int) -> bool:
    return isinstance(leaf, torch.Tensor) and leaf.dim() >= 1 and leaf.shape[0] == rows


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


@dataclass
class Shared:
    """What every epoch's pass shares: the parameters, the ring and its free events."""

    factor: float | Auto
    mode: str
    window: int
    seed: int
    device: torch.device
    augment: Callable[..., Any] | None
    max_bytes: int | None
    ordering: Ordering
    ring: Ring | None = None
    free: dict[int, Any] = field(default_factory=dict)  # slot -> event after its last gather
    warned: bool = False  # the loader does not pin memory: said once

    @property
    def group(self) -> int:
        """Batches mixed together: half the window, so the other half can land."""
        return max(1, self.window // 2)

    def ring_for(self, batch: Any) -> Ring:
        if self.ring is None:
            self.ring = Ring(batch, self.window, self.device, self.max_bytes)
        return self.ring
