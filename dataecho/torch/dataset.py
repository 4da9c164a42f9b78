"""Example echoing inside DataLoader workers, as an ``IterableDataset``."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Literal

from torch.utils.data import IterableDataset, get_worker_info

from .._checks import check_positive_int
from ..pipeline import pipeline
from ..stage import Stage, State
from ..stats import EchoStats, chain
from .sharding import shard_of

# Slots for per-worker counters in shared memory: (fresh examples, emitted examples)
# per worker; the main process (num_workers=0) uses slot 0.
_SLOTS = 256


class EchoDataset(IterableDataset[Any]):
    """Reads a map-style ``Dataset``, echoes each example, augments, shuffles.

    Each DataLoader worker of each DDP rank reads a disjoint shard of every epoch's
    permutation, so together they read every example exactly once per epoch; copies
    are made in the worker, after the expensive ``dataset[i]`` and before (or after)
    ``augment``, then spread by a per-worker shuffle window. The DataLoader batches.

    Epochs: call :meth:`set_epoch` before each epoch, as with ``DistributedSampler``.
    With ``persistent_workers=True`` (workers keep their copy of this object) or
    ``num_workers=0`` every new iteration also advances the epoch by itself.

    Checkpoints: with ``num_workers=0``, :meth:`state_dict` taken between batches
    resumes exactly. With workers, use torchdata's ``StatefulDataLoader``, which calls
    ``state_dict`` inside each worker (the iterator it gets is a checkpointable stage).

    Args:
        dataset: map-style data set of decoded examples (``len`` and ``[i]``).
        augment: ``fn(example)`` or ``fn(example, rng)`` (numpy Generator keyed by
            seed, epoch, shard and position), or None.
        echo: ``"before_augmentation"`` (copies augmented independently, the paper's
            best) or ``"after_augmentation"`` (identical copies).
        factor: echo factor >= 1, fractional allowed.
        buffer_size: per-worker shuffle window after the echo stage (1 = none).
        shuffle, seed, drop_remainder: as in :class:`dataecho.Source`.
        rank, world_size: override the DDP rank (default: from torch.distributed).

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
        if echo not in ("before_augmentation", "after_augmentation"):
            raise ValueError(
                f"echo must be 'before_augmentation' or 'after_augmentation' here, got "
                f"{echo!r}; for batch echoing wrap the DataLoader in dataecho.torch.EchoBatches"
            )
        self.kwargs: dict[str, Any] = dict(
            augment=augment, echo=echo, factor=factor, batch_size=None,
            buffer_size=check_positive_int(buffer_size, "buffer_size"), shuffle=shuffle,
            seed=seed, num_epochs=1)
        self.dataset = dataset
        self.drop_remainder = drop_remainder
        self.rank, self.world_size = rank, world_size
        # Build once to validate every argument now; keep only its repr, since the
        # object is pickled to every worker and a Source holds a whole permutation.
        self._repr = repr(pipeline(dataset, **self.kwargs))
        self._epoch = 0
        self._started = 0  # iterations begun by this copy of the object
        self._pipe: Stage[Any] | None = None
        self._pending: Mapping[str, Any] | None = None
        self._counts = multiprocessing.get_context("spawn").RawArray("q", 2 * _SLOTS)

    def set_epoch(self, epoch: int) -> None:
        """Sets the epoch whose permutation the next iteration reads."""
        self._epoch = check_positive_int(epoch, "epoch", minimum=0)
        self._started = 0

    def _build(self, epoch: int) -> Stage[Any]:
        shard, shards = shard_of(self.rank, self.world_size)
        return pipeline(self.dataset, **self.kwargs, epoch=epoch, shard_index=shard,
                        num_shards=shards)

    def __iter__(self) -> Iterator[Any]:
        epoch = self._epoch + self._started
        self._started += 1
        pipe = self._build(epoch)
        if self._pending is not None:
            pipe.load_state_dict(self._pending)
            self._pending = None
        self._pipe = _Counted(pipe, self._counts, _worker_slot())
        return self._pipe

    def state_dict(self) -> State:
        """The epoch being read and, once iteration began, the position within it."""
        epoch = self._epoch + max(self._started - 1, 0)
        totals = self.stats()
        return {"epoch": epoch,
                "pipeline": None if self._pipe is None else self._pipe.state_dict(),
                "totals": [totals.fresh_examples, totals.emitted_examples]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Makes the next iteration resume the checkpointed epoch where it stopped."""
        if not isinstance(state, Mapping) or "epoch" not in state:
            raise TypeError(
                "state must be a dict returned by EchoDataset.state_dict(), got "
                f"{type(state).__name__}; pass the dict saved from the checkpoint"
            )
        self._epoch, self._started = int(state["epoch"]), 0
        self._pending = state["pipeline"]
        if _worker_slot() == 0 and get_worker_info() is None:
            # The main process carries the totals; workers count from the restore on.
            self._counts[:] = [0] * (2 * _SLOTS)
            self._counts[0], self._counts[1] = (int(v) for v in state.get("totals", (0, 0)))
        if isinstance(self._pending, Mapping) and self._pending.get("stage") == "_Counted":
            self._pending = self._pending["upstream"]

    def stats(self) -> EchoStats:
        """Fresh and emitted examples over all workers of this process, all epochs.

        Counted since construction, or since :meth:`load_state_dict` in the main process
        plus the totals that checkpoint carried. Workers restored by a
        ``StatefulDataLoader`` count from the restore on.
        """
        fresh = sum(self._counts[0::2])
        emitted = sum(self._counts[1::2])
        return EchoStats(fresh, emitted, fresh, emitted, None)

    def __repr__(self) -> str:
        return f"EchoDataset({self._repr})"


def _worker_slot() -> int:
    info = get_worker_info()
    slot = 0 if info is None else info.id
    if slot >= _SLOTS:
        raise ValueError(f"num_workers must be < {_SLOTS} for EchoDataset, got {slot + 1}")
    return slot


class _Counted(Stage[Any]):
    """Publishes the echo counters of a worker's pipeline to shared memory."""

    upstream: Stage[Any]

    def __init__(self, upstream: Stage[Any], counts: Any, slot: int) -> None:
        self.upstream = upstream
        self._echo = next(s for s in chain(upstream) if hasattr(s, "echo_counts"))
        self._counts, self._slot = counts, 2 * slot
        # Totals of earlier epochs of this slot, minus what a restored pipeline had counted.
        fresh, emitted, _, _ = self._echo.echo_counts()
        self._base = (counts[self._slot] - fresh, counts[self._slot + 1] - emitted)

    def __next__(self) -> Any:
        item = next(self.upstream)
        fresh, emitted, _, _ = self._echo.echo_counts()
        self._counts[self._slot] = self._base[0] + fresh
        self._counts[self._slot + 1] = self._base[1] + emitted
        return item

    def _config(self) -> dict[str, Any]:
        return {}

    def _get_state(self) -> State:
        return {"upstream": self.upstream.state_dict()}

    def _set_state(self, state: Mapping[str, Any]) -> None:
        self.upstream.load_state_dict(state["upstream"])

    def __repr__(self) -> str:
        return repr(self.upstream)
