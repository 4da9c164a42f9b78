"""What an ``EchoDataset`` builds for each epoch: its arguments, checked, as one value.

:class:`Recipe` is the dataset's configuration, frozen: the data, the augmentation, the
variant, the factor, the window, the seed and how the data is read. It builds one
epoch's counted pipeline for the part of the data a reader reads
(:meth:`Recipe.tally`), so an iteration never asks the dataset for it.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from torch.utils.data import get_worker_info

from .._checks import check_augment, check_positive_int, check_seed
from ..factor import Auto, as_factor
from ..pipeline import echoed_items, pipeline
from ..readers import as_stage
from ..source import Source
from ..stage import Stage
from ..stride import Shard
from ..variants import EXAMPLE_LEVEL, Variant, check_variant
from .augment import seeded, warn_transform
from .iteration import Tally
from .ranks import Part, resolve_rank, shard_of
from .reading import Indexed, Streamed, read_of
from .streams import reader_of
from .workers import SharedTimes


@dataclass(frozen=True)
class Recipe:
    """An ``EchoDataset``'s arguments, checked; builds each epoch's pipeline.

    Build it with :meth:`of`, which checks the arguments together (see
    :class:`dataecho.torch.EchoDataset` for each one's meaning).

    Example:
        >>> recipe = Recipe.of([1, 2, 3], None, "before_augmentation", 2, 1, 0, None)
        >>> sorted(recipe.tally(Part(None, None), SharedTimes(), epoch=0))
        [1, 1, 2, 2, 3, 3]
    """

    dataset: Any
    augment: Callable[..., Any] | None
    echo: Variant
    factor: float | Auto
    buffer_size: int | None
    seed: int
    read: Indexed | Streamed

    @classmethod
    def of(cls, dataset: Any, augment: object, echo: object, factor: object,
           buffer_size: object, seed: object, read: object) -> Recipe:
        """The checked recipe; raises ``TypeError``/``ValueError`` naming the argument."""
        check_augment(augment)
        check_variant(echo, allowed=EXAMPLE_LEVEL,
                      hint="for batch echoing wrap the DataLoader in dataecho.torch.EchoBatches")
        factor = as_factor(factor)  # type: ignore[arg-type]
        warn_transform(dataset, echo, factor)
        # A one-argument augment draws from global generators: seeded per copy.
        return cls(dataset, seeded(augment), echo, factor,  # type: ignore[arg-type]
                   _window(factor, buffer_size), check_seed(seed), read_of(dataset, read))

    def tally(self, part: Part, times: SharedTimes, epoch: int) -> Tally:
        """One epoch's pipeline for the part ``part`` reads now, counted as handed over.

        Its read and its augmentation are timed into this reader's slot of ``times``.
        """
        rank, world_size = part.read_as or (None, None)
        shard, shards = shard_of(rank, world_size)
        data = self._stream(epoch, shard, shards, world_size) if isinstance(
            self.read, Streamed) else Source(
                self.dataset, shuffle=self.read.shuffle, seed=self.seed, epoch=epoch,
                shard_index=shard, num_shards=shards, drop_remainder=self.read.drop_remainder)
        stage = pipeline(data, augment=self.augment, echo=self.echo, factor=self.factor,
                         batch_size=None, buffer_size=self.buffer_size, seed=self.seed,
                         epoch=epoch, shard_index=shard, timing=times.timing())
        return Tally(stage, (shard, shards))

    def place(self, part: Part, times: SharedTimes, epoch: int, tally: Tally) -> Iterable[Any]:
        """What this reader hands over of ``tally``, its part of ``epoch``.

        ``tally`` itself, or under accelerate's sliced mode its items in this process's
        slots and placeholders in the others' (:meth:`dataecho.torch.placed.Slots.place`):
        as many runs as the longest (or, with ``drop_last``, the shortest) part where
        every part's size is known without reading (a map-style data set with a fixed
        factor), else as many as this part fills.
        """
        slots = part.slots
        if slots is None:
            return tally
        if not isinstance(self.read, Indexed) or isinstance(self.factor, Auto):
            if not part.agreed and part.seen.first_to_warn():
                _warn_unequal(self, slots.processes)
            return slots.fill(tally, tally.yields)
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        shards = slots.processes * workers
        sizes = [self._items(epoch, process * workers + worker, shards)
                 for process in range(slots.processes)]
        return slots.place(tally, tally.yields, slots.runs(sizes),
                           lambda: self.tally(part, times, epoch))

    def _items(self, epoch: int, shard: int, shards: int) -> int:
        """Items one epoch's pipeline of shard ``shard`` of ``shards`` hands over."""
        size = len(self.dataset)
        read = self.read.drop_remainder  # type: ignore[union-attr]
        usable = size - size % shards if read else size
        return echoed_items(len(range(shard, usable, shards)), self.factor,  # type: ignore[arg-type]
                            seed=self.seed, epoch=epoch, shard=shard)

    def _stream(self, epoch: int, shard: int, shards: int, world_size: int | None) -> Stage[Any]:
        """This reader's part of the stream, for one epoch."""
        reader = reader_of(self.dataset)
        if reader.shards is not None:  # it reads whole shards: TarShards
            return as_stage(reader.shards(self.dataset, shard, shards, epoch), "dataset")
        set_epoch = getattr(self.dataset, "set_epoch", None)
        if callable(set_epoch):
            set_epoch(epoch)
        if reader.check is not None:
            reader.check(self.dataset, resolve_rank(None, world_size)[1])
        source = as_stage(self.dataset, "dataset")
        split = self.read.split  # type: ignore[union-attr]
        if shards > 1 and split is None:
            raise ValueError(
                f"read=Streamed(split=...) must say who splits the stream "
                f"({type(self.dataset).__name__}) across the {shards} readers (DataLoader "
                "workers times ranks), got split=None; pass Streamed(split='stream') if the "
                "stream splits itself by worker and rank (reads get_worker_info()), or "
                "Streamed(split='dataecho') to have every reader read it all and keep its "
                "share")
        return Shard(source, shard, shards) if shards > 1 and split == "dataecho" else source


def _warn_unequal(recipe: Recipe, processes: int) -> None:
    """Warns that sliced processes' parts may end at different steps, without EqualSteps."""
    what = (f"factor={recipe.factor!r}" if isinstance(recipe.factor, Auto)
            else f"a stream ({type(recipe.dataset).__name__})")
    warnings.warn(
        f"EchoDataset reads {what} under accelerate's sliced mode: each of the "
        f"{processes} processes reads its own part, whose length is known only once read, "
        "so their epochs may end at different steps, and a DDP step only some processes "
        "take hangs; wrap the prepared loader in dataecho.torch.distributed.EqualSteps("
        "loader) (the Trainer: return it from get_train_dataloader), which ends every "
        "process's epoch at the same step", stacklevel=2)


def _window(factor: float | Auto, buffer_size: object) -> int | None:
    """The shuffle window after the echo, checked against the factor."""
    if not isinstance(factor, Auto):  # the default window is pipeline()'s to choose
        return None if buffer_size is None else check_positive_int(buffer_size, "buffer_size")
    if factor.agree is not None:
        raise ValueError(
            f"factor={factor!r}: DataLoader workers have no process group to agree "
            "through; drop agree, and wrap the loader in "
            "dataecho.torch.distributed.EqualSteps(loader) for equal steps per rank")
    if buffer_size is not None:
        raise ValueError(
            f"buffer_size is the post-echo shuffle of a fixed factor; with {factor!r} "
            f"the adaptive stage spreads copies by its own buffer, got buffer_size="
            f"{buffer_size!r}; pass factor=dataecho.Auto(buffer_size={buffer_size!r})")
    return None
