"""The demo's input pipeline: shard stream -> [echo] -> augment -> [echo] -> shuffle -> [echo]."""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Iterator
from typing import Any

from torch.utils.data import DataLoader, IterableDataset
from torch.utils.data import default_collate as torch_collate

from .._rng import derive_seed
from ..adaptive import AdaptiveExamples
from ..echo import Echo
from ..factor import Auto
from ..map import Map
from ..pipeline import VARIANTS
from ..shuffle import Shuffle
from ..stage import Stage
from ..torch import EchoBatches
from ..torch.sharding import shard_of
from .augment import CropFlip
from .stream import ShardStream

Factor = float | str  # a fixed echo factor >= 1, or "auto" (adaptive echoing)


class StreamDataset(IterableDataset[Any]):
    """An ``IterableDataset`` whose iterator is the demo's checkpointable pipeline.

    Each DataLoader worker builds, for its own disjoint part of the shards, one of the
    paper's three variants (``variant``; the baseline, ``factor=1``, is the same for all):

    - baseline: ``ShardStream -> Map(augment) -> Shuffle``;
    - ``"before_augmentation"``: ``ShardStream -> Echo -> Map(augment) -> Shuffle``:
      every copy gets its own crop and flip; ``"auto"``: ``ShardStream ->
      AdaptiveExamples(augment)``, which echoes only while no fresh sample is ready
      and batches itself;
    - ``"after_augmentation"``: ``ShardStream -> Map(augment) -> Echo -> Shuffle``:
      copies are identical and the augmentation runs once per fresh example;
      ``"auto"``: ``ShardStream -> Map(augment) -> AdaptiveExamples`` (as
      ``dataecho.make_auto(echo="after_augmentation")``), batching itself;
    - ``"batch"``: the baseline pipeline in the workers; the DataLoader batches it and
      :func:`make_loader` wraps the loader in ``EchoBatches(factor)`` in the trainer's
      process, so whole batches repeat (``"auto"``: ``AdaptiveEcho`` of batches).

    The shuffle window after an example-level ``Echo`` spreads the copies apart.
    Items are ``(image, label, uid)``; the ``uid`` lets the trainer count the fresh
    examples it actually trained on, for every variant.

    Args:
        url: base URL of the served shards.
        factor: echo factor, or ``"auto"``.
        variant: where the echo stands: one of ``dataecho.VARIANTS``.
        batch_size: examples per batch (for ``"auto"``; else the DataLoader's).
        buffer_size: shuffle window after the echo stage, in examples.
        seed: the one seed; stages derive theirs from it and the worker's shard.
        pad: crop padding of the augmentation, in pixels.
        prefetch: shards each worker downloads ahead.

    Example:
        >>> d = StreamDataset("http://127.0.0.1:1", factor=2, variant="batch", batch_size=8)
        >>> d.factor, d.variant, d.batches_itself
        (2.0, 'batch', False)
    """

    def __init__(self, url: str, *, factor: Factor = 1.0, variant: str = "before_augmentation",
                 batch_size: int = 128, buffer_size: int = 1280, seed: int = 0, pad: int = 2,
                 prefetch: int = 2) -> None:
        if factor != "auto" and (isinstance(factor, bool | str)
                                 or not isinstance(factor, numbers.Real)
                                 or not (math.isfinite(factor) and factor >= 1)):
            raise ValueError(
                f"factor must be a finite number >= 1 (1 is no echoing) or 'auto', got "
                f"{factor!r}; pass e.g. factor=2.0 for a fixed factor, factor=1 for the "
                "baseline, or factor='auto' for adaptive echoing")
        if variant not in VARIANTS:
            raise ValueError(f"variant must be one of {', '.join(map(repr, VARIANTS))}, got "
                             f"{variant!r}; pass variant='before_augmentation' (the paper's best)")
        self.url, self.batch_size, self.buffer_size = url, batch_size, buffer_size
        self.factor: Factor = factor if factor == "auto" else float(factor)
        self.variant = variant
        self.seed, self.prefetch = seed, prefetch
        self.augment = CropFlip(pad)

    @property
    def batches_itself(self) -> bool:
        """True when the workers yield batches (adaptive example echoing): the loader must not."""
        return self.factor == "auto" and self.variant != "batch"

    @property
    def echoes_batches(self) -> bool:
        """True when the loader's batches are echoed in the trainer's process."""
        return self.variant == "batch" and self.factor != 1.0

    def build(self, shard_index: int = 0, num_shards: int = 1) -> Stage[Any]:
        """The pipeline of one reader (``rank * num_workers + worker`` of ``num_shards``)."""
        def sub(tag: int) -> int:
            return derive_seed(self.seed, tag, shard_index)

        stage: Stage[Any] = ShardStream(self.url, seed=self.seed, shard_index=shard_index,
                                        num_shards=num_shards, prefetch=self.prefetch)
        example_echo = self.factor != 1.0 and self.variant != "batch"
        before = self.variant == "before_augmentation"
        if self.batches_itself:
            if not before:
                stage = Map(stage, self.augment, seed=sub(2))
            return AdaptiveExamples(stage, self.batch_size, collate=torch_collate, seed=sub(1),
                                    augment=self.augment if before else None)
        if example_echo and before:
            stage = Echo(stage, float(self.factor), seed=sub(1))
        stage = Map(stage, self.augment, seed=sub(2))
        if example_echo and not before:
            stage = Echo(stage, float(self.factor), seed=sub(1))
        return Shuffle(stage, self.buffer_size, seed=sub(3)) if self.buffer_size > 1 else stage

    def __iter__(self) -> Iterator[Any]:
        return self.build(*shard_of())


def make_loader(dataset: StreamDataset, *, batch_size: int, num_workers: int = 1
                ) -> Iterable[Any]:
    """A DataLoader over ``dataset`` with ``num_workers`` spawned worker processes.

    Workers are spawned, not forked: the parent runs the shard server's threads, and
    forking a threaded process can copy a held lock into the child. Each worker may run
    a whole shuffle window ahead: the windowed ``Shuffle`` emits in bursts (it reads a
    window, then yields it), and a queue of two batches would turn every refill into a
    stall of the trainer even when the worker keeps up on average.

    For batch echoing the loader comes wrapped in ``EchoBatches``: the same batch
    object is trained on ``factor`` times (the trainer changes none of it in place).
    """
    ahead = max(2, dataset.buffer_size // batch_size + 2) if num_workers else None
    loader: DataLoader[Any] = DataLoader(
        dataset, batch_size=None if dataset.batches_itself else batch_size,
        num_workers=num_workers, prefetch_factor=ahead,
        multiprocessing_context="spawn" if num_workers else None, persistent_workers=False)
    if dataset.echoes_batches:
        factor = (Auto(buffer_size=echo_buffer(dataset, batch_size))
                  if dataset.factor == "auto" else dataset.factor)
        return EchoBatches(loader, factor, seed=derive_seed(dataset.seed, 1))
    return loader


def echo_buffer(dataset: StreamDataset, batch_size: int) -> int:
    """Batches adaptive batch echoing draws from: two shuffle windows, at least 4.

    The windowed shuffle delivers a window of batches at once; with fewer batches kept,
    most of a burst's batches would never get their echoes.

    Example:
        >>> echo_buffer(StreamDataset("http://x", buffer_size=1280), 128)
        20
    """
    return max(4, 2 * max(1, dataset.buffer_size // batch_size))


def describe(dataset: StreamDataset, *, batch_size: int, num_workers: int) -> str:
    """The repr of one worker's pipeline plus the loader around it, for the result file."""
    stage = dataset.build(0, max(num_workers, 1))
    try:
        head = repr(stage)
    finally:
        stage.close()
    size = None if dataset.batches_itself else batch_size
    loader = f"DataLoader({head}, batch_size={size}, num_workers={num_workers})"
    if dataset.echoes_batches:
        buffer = (f", buffer_size={echo_buffer(dataset, batch_size)}"
                  if dataset.factor == "auto" else "")
        return (f"EchoBatches({loader}, factor={dataset.factor!r}, "
                f"seed={derive_seed(dataset.seed, 1)}{buffer})")
    return loader
