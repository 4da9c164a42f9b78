"""The demo's input pipeline: shard stream -> [echo] -> augment -> shuffle, in workers."""

from __future__ import annotations

import numbers
from collections.abc import Iterator
from typing import Any

from torch.utils.data import DataLoader, IterableDataset
from torch.utils.data import default_collate as torch_collate

from .._rng import derive_seed
from ..echo import Echo
from ..map import Map
from ..shuffle import Shuffle
from ..stage import Stage
from ..torch.sharding import shard_of
from .augment import CropFlip
from .stream import ShardStream

Factor = float | str  # a fixed echo factor >= 1, or "auto" (adaptive echoing)


class StreamDataset(IterableDataset[Any]):
    """An ``IterableDataset`` whose iterator is the demo's checkpointable pipeline.

    Each DataLoader worker builds, for its own disjoint part of the shards:

    - ``factor=1`` (baseline): ``ShardStream -> Map(augment) -> Shuffle``;
    - fixed ``factor``: ``ShardStream -> Echo -> Map(augment) -> Shuffle``, echoing
      before augmentation, with the shuffle window spreading the copies apart;
    - ``factor="auto"``: ``ShardStream -> AdaptiveExamples`` (echo only while no fresh
      sample is ready), which batches itself.

    Items are ``(image, label, uid)``; the ``uid`` lets the trainer count the fresh
    examples it actually trained on.

    Args:
        url: base URL of the served shards.
        factor: echo factor, or ``"auto"``.
        batch_size: examples per batch (for ``"auto"``; else the DataLoader's).
        buffer_size: shuffle window after the echo stage, in examples.
        seed: the one seed; stages derive theirs from it and the worker's shard.
        pad: crop padding of the augmentation, in pixels.
        prefetch: shards each worker downloads ahead.

    Example:
        >>> StreamDataset("http://127.0.0.1:1", factor=2, batch_size=8).factor
        2.0
    """

    def __init__(self, url: str, *, factor: Factor = 1.0, batch_size: int = 128,
                 buffer_size: int = 1280, seed: int = 0, pad: int = 2,
                 prefetch: int = 2) -> None:
        if factor != "auto" and (isinstance(factor, bool | str)
                                 or not isinstance(factor, numbers.Real) or factor < 1):
            raise ValueError(f"factor must be a number >= 1 or 'auto', got {factor!r}")
        self.url, self.batch_size, self.buffer_size = url, batch_size, buffer_size
        self.factor: Factor = factor if factor == "auto" else float(factor)
        self.seed, self.prefetch = seed, prefetch
        self.augment = CropFlip(pad)

    @property
    def batches_itself(self) -> bool:
        """True when the pipeline yields batches (adaptive), so the loader must not."""
        return self.factor == "auto"

    def build(self, shard_index: int = 0, num_shards: int = 1) -> Stage[Any]:
        """The pipeline of one reader (``rank * num_workers + worker`` of ``num_shards``)."""
        def sub(tag: int) -> int:
            return derive_seed(self.seed, tag, shard_index)

        stage: Stage[Any] = ShardStream(self.url, seed=self.seed, shard_index=shard_index,
                                        num_shards=num_shards, prefetch=self.prefetch)
        if self.factor == "auto":
            from ..adaptive_examples import AdaptiveExamples

            return AdaptiveExamples(stage, self.batch_size, augment=self.augment,
                                    collate=torch_collate, seed=sub(1))
        if self.factor != 1.0:
            stage = Echo(stage, float(self.factor), seed=sub(1))
        stage = Map(stage, self.augment, seed=sub(2))
        return Shuffle(stage, self.buffer_size, seed=sub(3)) if self.buffer_size > 1 else stage

    def __iter__(self) -> Iterator[Any]:
        return self.build(*shard_of())


def make_loader(dataset: StreamDataset, *, batch_size: int, num_workers: int = 1
                ) -> DataLoader[Any]:
    """A DataLoader over ``dataset`` with ``num_workers`` spawned worker processes.

    Workers are spawned, not forked: the parent runs the shard server's threads, and
    forking a threaded process can copy a held lock into the child. Each worker may run
    a whole shuffle window ahead: the windowed ``Shuffle`` emits in bursts (it reads a
    window, then yields it), and a queue of two batches would turn every refill into a
    stall of the trainer even when the worker keeps up on average.
    """
    ahead = max(2, dataset.buffer_size // batch_size + 2) if num_workers else None
    return DataLoader(dataset, batch_size=None if dataset.batches_itself else batch_size,
                      num_workers=num_workers, prefetch_factor=ahead,
                      multiprocessing_context="spawn" if num_workers else None,
                      persistent_workers=False)


def describe(dataset: StreamDataset, *, batch_size: int, num_workers: int) -> str:
    """The repr of one worker's pipeline plus the loader around it, for the result file."""
    stage = dataset.build(0, max(num_workers, 1))
    try:
        head = repr(stage)
    finally:
        stage.close()
    if dataset.batches_itself:
        return f"DataLoader({head}, batch_size=None, num_workers={num_workers})"
    return f"DataLoader({head}, batch_size={batch_size}, num_workers={num_workers})"
