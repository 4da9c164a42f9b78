"""Example echoing inside DataLoader workers, as an ``IterableDataset``."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Literal

from torch.utils.data import IterableDataset, get_worker_info

from .._checks import check_augment, check_positive_int
from ..pipeline import pipeline
from ..stage import Stage, State
from ..stats import EchoStats
from .sharding import check_rank, resolve_rank, shard_of
from .workers import SLOTS, Counted, EpochCounter, worker_slot


class EchoDataset(IterableDataset[Any]):
    """Reads a map-style ``Dataset``, echoes each example, augments, shuffles.

    Each DataLoader worker of each DDP rank reads a disjoint shard of every epoch's
    permutation, so together they read every example exactly once per epoch; copies
    are made in the worker, after the expensive ``dataset[i]`` and before (or after)
    ``augment``, then spread by a per-worker shuffle window. The DataLoader batches.

    Shards: worker ``w`` of rank ``r`` reads shard ``r * num_workers + w`` of
    ``world_size * num_workers``. Shards differ by at most one example, so ranks may
    differ by up to ``num_workers`` examples per epoch; ``drop_remainder=True`` makes
    every shard equally long, and with an integer ``factor`` every rank then takes the
    same number of steps, which DDP needs (a fractional factor draws each shard's extra
    copies separately, so counts still differ: give DDP a step budget).

    Epochs: each new iteration of the DataLoader reads the next epoch by itself, with
    any number of workers, persistent or not (the counter is in shared memory, so new
    worker copies of this object see it; this is what Lightning needs, which never
    calls ``set_epoch`` on an ``IterableDataset``). :meth:`set_epoch` sets the epoch the
    next iteration reads, as with ``DistributedSampler``.

    Checkpoints: with ``num_workers=0``, :meth:`state_dict` taken between batches
    resumes exactly; taken after an epoch was read to its end, it resumes at the start
    of the next epoch. With workers, use torchdata's ``StatefulDataLoader``, which calls
    ``state_dict`` inside each worker (the iterator it gets is a checkpointable stage).

    ``factor="auto"`` is not supported here: adaptive echoing decides at each training
    step whether fresh data is late, which a DataLoader worker cannot see. Use
    ``EchoBatches(loader, factor="auto")`` around the DataLoader, or
    ``dataecho.pipeline(..., factor="auto")`` (:class:`dataecho.AdaptiveExamples`) in
    the training process.

    Args:
        dataset: map-style data set of decoded examples (``len`` and ``[i]``).
        augment: ``augment(example)`` or ``augment(example, rng)`` (numpy Generator
            keyed by seed, epoch, shard and position), or None.
        echo: ``"before_augmentation"`` (copies augmented independently, the paper's
            best) or ``"after_augmentation"`` (identical copies).
        factor: echo factor >= 1, fractional allowed; 1 for no echoing (a baseline).
        buffer_size: per-worker shuffle window after the echo stage (1 = none).
        shuffle, seed: as in :class:`dataecho.Source`.
        drop_remainder: drop ``len(dataset) % (world_size * num_workers)`` examples of
            each epoch (a different few each epoch, also with ``shuffle=False``; see
            :class:`dataecho.Source`) so every shard has the same length. Default
            False: nothing is dropped.
        rank, world_size: override the DDP rank (default: from torch.distributed, read
            in the training process when iteration starts or when the DataLoader hands
            this object to its workers, so ``spawn`` and ``forkserver`` workers, which
            have no process group, still read their rank's shard).

    Example:
        >>> import torch
        >>> from torch.utils.data import DataLoader
        >>> ds = EchoDataset(list(range(8)), factor=2, buffer_size=4)
        >>> batches = list(DataLoader(ds, batch_size=4))
        >>> len(batches), ds.stats().fresh_examples, ds.stats().emitted_examples
        (4, 8, 16)
    """

    def __init__(
        self,
        dataset: Sequence[Any],
        *,
        augment: Callable[..., Any] | None = None,
        echo: Literal["before_augmentation", "after_augmentation"] = "before_augmentation",
        factor: float = 2.0,
        buffer_size: int = 1000,
        shuffle: bool = True,
        seed: int = 0,
        drop_remainder: bool = False,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> None:
        if not (hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__")):
            raise TypeError(
                f"dataset must be a map-style data set with len() and integer indexing "
                f"(a torch Dataset, a list, a numpy array), got {type(dataset).__name__}; "
                "for a stream (an IterableDataset) wrap its DataLoader in "
                "dataecho.torch.EchoBatches instead, or materialise it with list(...)"
            )
        if len(dataset) == 0:
            raise ValueError(
                "dataset is empty (len(dataset) == 0); pass a data set with examples"
            )
        check_augment(augment)
        if echo not in ("before_augmentation", "after_augmentation"):
            raise ValueError(
                f"echo must be 'before_augmentation' or 'after_augmentation' here, got "
                f"{echo!r}; for batch echoing wrap the DataLoader in dataecho.torch.EchoBatches"
            )
        if isinstance(factor, str) and factor == "auto":
            raise ValueError(
                "factor='auto' is not supported by EchoDataset: adaptive echoing decides at "
                "each training step whether fresh data is late, which a DataLoader worker "
                "cannot see; pass a fixed factor such as factor=2, or wrap the DataLoader in "
                "dataecho.torch.EchoBatches(loader, factor='auto') for adaptive batch "
                "echoing, or use dataecho.pipeline(data, factor='auto', batch_size=...) "
                "(dataecho.AdaptiveExamples) for adaptive example echoing"
            )
        self.kwargs: dict[str, Any] = dict(
            augment=augment, echo=echo, factor=factor, batch_size=None,
            buffer_size=check_positive_int(buffer_size, "buffer_size"), shuffle=shuffle,
            seed=seed, num_epochs=1, drop_remainder=bool(drop_remainder))
        self.dataset = dataset
        self.drop_remainder = bool(drop_remainder)
        self.rank, self.world_size = check_rank(rank, world_size)
        # Build once to validate every argument now (the explicit rank's shard too);
        # keep only its repr, since the object is pickled to every worker and a Source
        # holds a whole permutation.
        shard, shards = 0, 1
        if self.rank is not None and self.world_size is not None:
            shard, shards = self.rank, self.world_size
        self._repr = repr(pipeline(dataset, **self.kwargs, shard_index=shard,
                                   num_shards=shards))
        self._epochs = EpochCounter()
        self._started = 0  # iterations begun by this copy of the object
        self._pipe: Counted | None = None
        # (epoch, position): what the next iteration of this copy resumes; the position
        # is a pipeline state, None (the epoch's start) or _ENDED (after its end).
        self._pending: tuple[int, Mapping[str, Any] | str | None] | None = None
        self._counts = multiprocessing.get_context("spawn").RawArray("q", 2 * SLOTS)

    def __getstate__(self) -> dict[str, Any]:
        # Pickled for DataLoader workers (spawn, forkserver): they have no process group,
        # so the rank and world size are read here, in the training process.
        state = self.__dict__.copy()
        state["rank"], state["world_size"] = resolve_rank(self.rank, self.world_size)
        return state

    def set_epoch(self, epoch: int) -> None:
        """Sets the epoch whose permutation the next iteration reads.

        A checkpoint loaded for another epoch is dropped (its epoch is over or skipped);
        one loaded for this epoch still resumes where it stopped.
        """
        epoch = check_positive_int(epoch, "epoch", minimum=0)
        self._epochs.set(epoch)
        self._pipe = None  # the position in an earlier iteration is no longer resumed
        if self._pending is not None and self._pending[0] != epoch:
            self._pending = None

    def _build(self, epoch: int) -> Stage[Any]:
        shard, shards = shard_of(self.rank, self.world_size)
        return pipeline(self.dataset, **self.kwargs, epoch=epoch, shard_index=shard,
                        num_shards=shards)

    def __iter__(self) -> Iterator[Any]:
        pending, self._pending = self._pending, None
        epoch = self._epochs.claim(self._started, None if pending is None else pending[0])
        self._started += 1
        pipe = self._build(epoch)
        position = None if pending is None else pending[1]
        if isinstance(position, Mapping):
            pipe.load_state_dict(position)
        self._pipe = Counted(pipe, self._counts, worker_slot(), epoch, self._epochs.rewind)
        if position == _ENDED:
            self._pipe.ended = True  # the checkpointed epoch was read to its end
        return self._pipe

    def state_dict(self) -> State:
        """The epoch and the position in it: None for its start, ``"ended"`` after its end.

        The state after an epoch's last batch names that epoch whether or not the
        DataLoader saw its end inside that batch (a partial last batch), so resuming
        the epoch loop at ``state["epoch"]`` is exact with and without ``set_epoch``:
        the first iteration reads what is left of that epoch, nothing when it ended.
        """
        pipe = self._pipe
        position: State | str | None
        if pipe is not None:
            epoch, position = pipe.epoch, _ENDED if pipe.ended else pipe.state_dict()
        elif self._pending is not None:
            epoch, loaded = self._pending
            position = dict(loaded) if isinstance(loaded, Mapping) else loaded
        else:
            epoch, position = self._epochs.next(), None
        totals = self.stats()
        return {"epoch": epoch, "pipeline": position,
                "totals": [totals.fresh_examples, totals.emitted_examples]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Makes the next iteration resume the checkpointed epoch where it stopped."""
        if not isinstance(state, Mapping) or "epoch" not in state:
            raise TypeError(
                "state must be a dict returned by EchoDataset.state_dict(), got "
                f"{type(state).__name__}; pass the dict saved from the checkpoint"
            )
        epoch, self._pipe = int(state["epoch"]), None
        position = state.get("pipeline")
        if isinstance(position, Mapping) and position.get("stage") == "Counted":
            position = _ENDED if position.get("ended") else position["upstream"]
        if get_worker_info() is not None:
            # A StatefulDataLoader restoring this worker: its next iteration is the
            # checkpointed one, whatever the other workers claim.
            self._pending, self._started = (epoch, position), 0
        else:
            self._pending = None if position is None else (epoch, position)
            self._epochs.set(epoch)
            # The main process carries the totals; workers count from the restore on.
            self._counts[:] = [0] * (2 * SLOTS)
            self._counts[0], self._counts[1] = (int(v) for v in state.get("totals", (0, 0)))

    def stats(self) -> EchoStats:
        """Fresh and emitted examples over all workers of this process, all epochs.

        Counted where this dataset hands examples to the DataLoader, not where the
        training loop receives them: ``emitted_examples`` includes the examples that
        ``DataLoader(drop_last=True)`` drops from each worker's last, incomplete batch,
        and those of batches the workers prefetched but the loop has not taken yet (or
        never will, if it stops early). For what the steps used, count the batches'
        lengths in the loop.

        Counted since construction, or since :meth:`load_state_dict` in the main process
        plus the totals that checkpoint carried. Workers restored by a
        ``StatefulDataLoader`` count from the restore on.
        """
        fresh = sum(self._counts[0::2])
        emitted = sum(self._counts[1::2])
        return EchoStats(fresh, emitted, fresh, emitted, None)

    def __repr__(self) -> str:
        return f"EchoDataset({self._repr})"


_ENDED = "ended"  # the position after an epoch's end, in a state
