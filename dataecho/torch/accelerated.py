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

import sys
from typing import Literal

Split = Literal["dispatched", "sliced"]


def split_of(dataset: object) -> Split | None:
    """How a loader prepared by accelerate is reading ``dataset`` now, or None.

    Called when an iteration starts: in the training process, and in DataLoader
    workers started by ``fork``, which carry the training process's record. A loader
    not prepared by accelerate (or accelerate not imported) gives None.

    Example:
        >>> split_of([1, 2, 3]) is None
        True
    """
    state = sys.modules.get("accelerate.state")
    if state is None or not state.is_initialized():
        return None
    for loader in reversed(state.GradientState().dataloader_references):
        read = getattr(loader, "dataset", None)
        if read is dataset:
            return "dispatched" if type(loader).__name__ == "DataLoaderDispatcher" else None
        if getattr(read, "dataset", None) is dataset:
            return "sliced" if type(read).__name__ == "IterableDatasetShard" else None
    return None
