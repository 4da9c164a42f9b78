"""How a loader that Hugging Face accelerate prepared reads an ``EchoDataset``.

``accelerator.prepare(loader)`` (and so the Hugging Face ``Trainer``) splits an
``IterableDataset`` across processes itself, in one of two ways:

- dispatched (accelerate's default for an ``IterableDataset``): process 0 alone
  iterates the data set and sends every process its part of each batch: the data is
  read once, with process 0's DataLoader workers only (1/N of the job's);
- sliced (``DataLoaderConfiguration(dispatch_batches=False)``): every process
  iterates the data set, wrapped in ``IterableDatasetShard``, and keeps its own
  slice of each ``batch_size * num_processes`` items.

Dispatched, the data set yields the whole epoch on process 0. Sliced, an
``EchoDataset`` the shard holds directly reads its process's part only and puts its
examples in the slots the shard keeps (:mod:`dataecho.torch.placed`): read once,
with every process's workers; one inside a wrapper of the user's (which may not pass
placeholders through) reads the whole epoch on every process, N times the reading.
:func:`split_of` tells the data set which way it is read, from accelerate's record of
the loader being iterated (``GradientState``), without importing accelerate.
"""

from __future__ import annotations

import multiprocessing
import sys
import warnings
from typing import Any, Literal, NamedTuple

import torch.distributed as dist

from .placed import Slots

#: How accelerate has the data set read: "placed" is sliced, each process its own part.
Split = Literal["dispatched", "sliced", "placed"]


def split_of(dataset: object) -> Split | None:
    """How a loader prepared by accelerate is reading ``dataset`` now, or None.

    Called when an iteration starts: in the training process, and in DataLoader
    workers started by ``fork``, which carry the training process's record. The data
    set is found where the loader reads it, or inside the data sets that wrap it (an
    ``IterableDataset`` that iterates it, a few attributes deep): wrapped, it is read
    the same way. A loader not prepared by accelerate (or accelerate not imported)
    gives None.

    Example:
        >>> split_of([1, 2, 3]) is None
        True
    """
    return _reading(dataset)[0]


def _reading(dataset: object) -> tuple[Split | None, Any]:
    """:func:`split_of`, and the ``IterableDatasetShard`` of a sliced loader."""
    state = sys.modules.get("accelerate.state")
    if state is None or not state.is_initialized():
        return None, None
    for loader in reversed(state.GradientState().dataloader_references):
        read = getattr(loader, "dataset", None)
        if not _holds(read, dataset, _DEPTH):
            continue
        if type(loader).__name__ == "DataLoaderDispatcher":
            return "dispatched", None
        if type(read).__name__ != "IterableDatasetShard":
            return None, None
        return "sliced", read
    return None, None


class SeenSplit:
    """How accelerate splits a data set, as the first copy to see it recorded it.

    Shared memory, so the training process knows what its DataLoader workers saw: a
    data set inside a wrapper is not told ``set_epoch`` by accelerate's loader, and
    then only the workers ever look.

    Example:
        >>> seen = SeenSplit()
        >>> seen.get(); seen.record("sliced"); seen.get()
        'sliced'
    """

    _CODES: tuple[Split | None, ...] = (None, "dispatched", "sliced", "placed")

    def __init__(self) -> None:
        context = multiprocessing.get_context("spawn")
        self._code = context.RawValue("b", 0)
        self._warned = context.RawValue("b", 0)  # a copy warned that parts may differ

    def first_to_warn(self) -> bool:
        """Whether this copy is the first to warn that the processes' parts may end at
        different steps (then the warning is recorded as given, for every copy).

        Example:
            >>> seen = SeenSplit()
            >>> seen.first_to_warn(), seen.first_to_warn()
            (True, False)
        """
        first, self._warned.value = not self._warned.value, 1
        return first

    def record(self, split: Split) -> None:
        """Records ``split`` for every copy of the data set."""
        self._code.value = self._CODES.index(split)

    def get(self) -> Split | None:
        """The split recorded, or None before any copy saw one."""
        return self._CODES[int(self._code.value)]


class Reading(NamedTuple):
    """What a data set reads now: see :func:`reads_as`."""

    #: The rank and world size it reads as; None: nothing.
    read_as: tuple[int | None, int | None] | None
    #: Whether that cannot change any more.
    final: bool
    #: The slots its process keeps of a sliced stream; None: it hands over every item.
    slots: Slots | None = None


def reads_as(dataset: object, rank: int | None, world_size: int | None, process: int | None,
             seen: SeenSplit) -> Reading:
    """The part ``dataset`` reads (None: nothing), whether that is final, and its slots.

    Under a loader that accelerate prepared: dispatched, the whole epoch (rank 0 of 1)
    on process 0 alone (the other processes' iterations, which accelerate starts but
    never reads, read nothing); sliced, with the shard holding ``dataset`` itself,
    process ``p``'s part (rank ``p`` of ``num_processes``) in the slots the shard keeps;
    sliced inside a wrapper of the user's, the whole epoch on every process. Elsewhere
    ``(rank, world_size)`` as given. The split seen is recorded in ``seen``, for every
    copy of the data set; the first copy to see a split that costs reading warns once
    (dispatched: on process 0; sliced inside a wrapper). Not final while accelerate is
    set up but has recorded no loader of ``dataset``: its prepare takes a stateful
    loader's state, which begins an iteration, before it records the loader.

    Args:
        dataset: the data set a loader may be reading.
        rank, world_size: the part the data set was told to read (None: from
            ``torch.distributed``).
        process: this process's rank, or None outside a process group.
        seen: where the split is recorded.

    Raises:
        ValueError: ``rank``/``world_size`` were given for a data set accelerate splits.

    Example:
        >>> reads_as([1, 2], 1, 2, None, SeenSplit()).read_as
        (1, 2)
    """
    split, shard = _reading(dataset)
    if split is None:
        state = sys.modules.get("accelerate.state")
        return Reading((rank, world_size), state is None or not state.is_initialized())
    if world_size not in (None, 1):
        how = ("process 0 reads the data for every process" if split == "dispatched"
               else "every process keeps its slice of each run of batches")
        raise ValueError(
            f"EchoDataset(rank={rank}, world_size={world_size}) is read by a loader that "
            f"accelerate prepared, which splits the data itself ({how}), so each rank "
            "would train on a part of its own part; drop rank and world_size "
            "(EchoDataset then reads what accelerate has it read)")
    held = shard is not None and getattr(shard, "dataset", None) is dataset
    slots = Slots.of(shard) if held else None
    if seen.get() is None:  # the first copy to see the split: say what it costs, once
        if split == "dispatched" and (process or 0) == 0:
            _warn_dispatched()
        elif shard is not None and not held:
            _warn_wrapped(shard)
    seen.record("placed" if slots is not None else split)
    if slots is not None:
        return Reading((slots.process, slots.processes), True, slots)
    if split == "dispatched" and (process or 0) != 0:
        return Reading(None, True)
    return Reading((0, 1), True)


def _warn_dispatched() -> None:
    """Warns that process 0's DataLoader workers read for every process."""
    processes = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
    if processes < 2:
        return
    warnings.warn(
        f"EchoDataset is read by accelerate's dispatched loader (its default for an "
        f"IterableDataset): process 0's DataLoader workers read the data for all "
        f"{processes} processes, 1/{processes} of the job's reading capacity, which an "
        "input-bound job pays in wall-clock time; pass DataLoaderConfiguration("
        "dispatch_batches=False) to the Accelerator (the Trainer: TrainingArguments(..., "
        "accelerator_config={'dispatch_batches': False})), and every process reads its "
        "own part", stacklevel=3)


def _warn_wrapped(shard: Any) -> None:
    """Warns that a wrapper of the user's makes every process read the whole epoch."""
    processes = int(getattr(shard, "num_processes", 1))
    if processes < 2:
        return
    wrapper = type(getattr(shard, "dataset", None)).__name__
    warnings.warn(
        f"EchoDataset is read by accelerate's sliced loader inside a {wrapper}, which may "
        f"not pass placeholders through, so each of the {processes} processes reads the "
        f"whole epoch and keeps its slice ({processes} times the reading); hand "
        "accelerate the EchoDataset itself, with the wrapper's work inside it (as its "
        "data, EchoDataset(YourWrapper(data)), or its augment)", stacklevel=3)


# How deep a wrapper may hold the data set: IterableDatasetShard, the user's own
# wrappers (each one attribute), and a container of them.
_DEPTH = 4
_WIDE = 16  # a container with more items is data, not a wrapper's parts


def _holds(obj: object, target: object, depth: int) -> bool:
    """Whether ``obj`` is ``target`` or holds it within ``depth`` attributes or items."""
    if obj is target:
        return True
    if depth == 0 or isinstance(obj, str | bytes | int | float | type):
        return False
    if isinstance(obj, list | tuple):
        parts: Any = obj if len(obj) <= _WIDE else ()
    elif isinstance(obj, dict):
        parts = obj.values() if len(obj) <= _WIDE else ()
    else:
        fields = getattr(obj, "__dict__", None)
        parts = fields.values() if isinstance(fields, dict) else ()
    return any(_holds(part, target, depth - 1) for part in parts)
