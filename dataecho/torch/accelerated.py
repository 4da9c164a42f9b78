"""How a loader that Hugging Face accelerate prepared reads an ``EchoDataset``.

``accelerator.prepare(loader)`` (and so the Hugging Face ``Trainer``) splits an
``IterableDataset`` across processes itself, in one of two ways:

- dispatched (accelerate's default for an ``IterableDataset``): process 0 alone
  iterates the data set and sends every process its part of each batch;
- sliced (``DataLoaderConfiguration(dispatch_batches=False)``): every process
  iterates the data set, wrapped in ``IterableDatasetShard``, and keeps its own
  slice of each ``batch_size * num_processes`` items.

Either way the data set must yield the whole epoch, the same on every process; an
``EchoDataset`` that also read only its rank's part would train each example on one
rank's slice and never on the rest. :func:`split_of` tells the data set which way it
is read, from accelerate's record of the loader being iterated (``GradientState``),
without importing accelerate.
"""

from __future__ import annotations

import multiprocessing
import sys
from typing import Any, Literal

Split = Literal["dispatched", "sliced"]


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
    state = sys.modules.get("accelerate.state")
    if state is None or not state.is_initialized():
        return None
    for loader in reversed(state.GradientState().dataloader_references):
        read = getattr(loader, "dataset", None)
        if not _holds(read, dataset, _DEPTH):
            continue
        if type(loader).__name__ == "DataLoaderDispatcher":
            return "dispatched"
        return "sliced" if type(read).__name__ == "IterableDatasetShard" else None
    return None


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

    _CODES: tuple[Split | None, ...] = (None, "dispatched", "sliced")

    def __init__(self) -> None:
        self._code = multiprocessing.get_context("spawn").RawValue("b", 0)

    def record(self, split: Split) -> None:
        """Records ``split`` for every copy of the data set."""
        self._code.value = self._CODES.index(split)

    def get(self) -> Split | None:
        """The split recorded, or None before any copy saw one."""
        return self._CODES[int(self._code.value)]


def reads_as(dataset: object, rank: int | None, world_size: int | None, process: int | None,
             seen: SeenSplit) -> tuple[tuple[int | None, int | None] | None, bool]:
    """The rank and world size ``dataset`` reads as (None: nothing), and whether that is final.

    Under a loader that accelerate prepared, the whole epoch (rank 0 of 1): on process
    0 alone when batches are dispatched (the other processes' iterations, which
    accelerate starts but never reads, read nothing), on every process when each keeps
    its slice. Elsewhere ``(rank, world_size)`` as given. The split seen is recorded in
    ``seen``, for every copy of the data set. Not final while accelerate is set up but
    has recorded no loader of ``dataset``: its prepare takes a stateful loader's state,
    which begins an iteration, before it records the loader.

    Args:
        dataset: the data set a loader may be reading.
        rank, world_size: the part the data set was told to read (None: from
            ``torch.distributed``).
        process: this process's rank, or None outside a process group.
        seen: where the split is recorded.

    Raises:
        ValueError: ``rank``/``world_size`` were given for a data set accelerate splits.

    Example:
        >>> reads_as([1, 2], 1, 2, None, SeenSplit())[0]
        (1, 2)
    """
    split = split_of(dataset)
    if split is None:
        state = sys.modules.get("accelerate.state")
        return (rank, world_size), state is None or not state.is_initialized()
    seen.record(split)
    if world_size not in (None, 1):
        how = ("process 0 reads the data for every process" if split == "dispatched"
               else "every process reads the data and keeps its slice")
        raise ValueError(
            f"EchoDataset(rank={rank}, world_size={world_size}) is read by a loader that "
            f"accelerate prepared, which splits the data itself ({how}), so each rank "
            "would train on a part of its own part; drop rank and world_size "
            "(EchoDataset then reads the whole epoch under accelerate)")
    if split == "dispatched" and (process or 0) != 0:
        return None, True
    return (0, 1), True


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
