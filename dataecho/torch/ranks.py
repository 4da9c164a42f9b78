"""Ranks and workers: which part of the data this DDP rank's DataLoader worker reads."""

from __future__ import annotations

import os
from typing import Any

import torch.distributed as dist
from torch.utils.data import get_worker_info

from .._checks import check_positive_int
from . import accelerated
from .placed import Slots


def check_rank(rank: int | None, world_size: int | None) -> tuple[int | None, int | None]:
    """Returns ``(rank, world_size)`` after checking the values that were given.

    None stands for "read it from ``torch.distributed`` when iterating", so only the
    given values are checked: ``world_size >= 1`` and ``0 <= rank < world_size``.

    Example:
        >>> check_rank(1, 2), check_rank(None, None)
        ((1, 2), (None, None))
    """
    if (rank is None) != (world_size is None):
        given, missing = ("rank", "world_size") if world_size is None else ("world_size", "rank")
        raise ValueError(
            f"{given} and {missing} go together, got {given}="
            f"{rank if world_size is None else world_size!r} and {missing}=None; pass both, "
            "or neither to read them from torch.distributed")
    if world_size is not None:
        world_size = check_positive_int(world_size, "world_size")
    if rank is not None:
        rank = check_positive_int(rank, "rank", minimum=0)
        if world_size is not None and rank >= world_size:
            raise ValueError(
                f"rank must be in [0, world_size={world_size}), got {rank}; pass the "
                "process's DDP rank, or leave both None to read them from torch.distributed"
            )
    return rank, world_size


def resolve_rank(rank: int | None, world_size: int | None) -> tuple[int | None, int | None]:
    """Fills the None among ``rank`` and ``world_size`` from ``torch.distributed``.

    Only when its default process group is initialised in the calling process; else
    they stay None. Call it in the training process: a DataLoader worker started
    with ``spawn`` or ``forkserver`` has no process group of its own.

    Example:
        >>> resolve_rank(None, None), resolve_rank(1, 2)
        ((None, None), (1, 2))
    """
    if (rank is None or world_size is None) and dist.is_available() and dist.is_initialized():
        rank = dist.get_rank() if rank is None else rank
        world_size = dist.get_world_size() if world_size is None else world_size
    return rank, world_size


def shard_of(rank: int | None = None, world_size: int | None = None) -> tuple[int, int]:
    """Returns ``(shard_index, num_shards)`` for the calling worker of the calling rank.

    Ranks come from ``torch.distributed`` when it is initialised in the calling
    process (else rank 0 of 1) unless given; workers from ``get_worker_info()``. In a
    ``spawn``/``forkserver`` DataLoader worker of a multi-process job (``WORLD_SIZE``
    > 1) there is no process group: pass ``rank`` and ``world_size`` there.

    Raises:
        ValueError: a rank outside ``[0, world_size)``, or such a worker without them.
    Shard ``rank * num_workers + worker`` of ``world_size * num_workers``: disjoint,
    and together complete.

    Example:
        >>> shard_of()
        (0, 1)
        >>> shard_of(rank=1, world_size=2)
        (1, 2)
    """
    rank, world_size = resolve_rank(*check_rank(rank, world_size))
    info = get_worker_info()
    launched = os.environ.get("WORLD_SIZE", "1")
    if (rank is None or world_size is None) and info is not None and launched not in ("", "1"):
        # A spawn/forkserver worker of a DDP job (torchrun sets WORLD_SIZE) has no
        # process group: rank 0 of 1 would make every rank read every example.
        raise ValueError(
            f"shard_of was called in a DataLoader worker of a {launched}-process job "
            "without rank and world_size, and torch.distributed is not initialised in "
            "this worker (spawn/forkserver start); pass rank=dist.get_rank() and "
            "world_size=dist.get_world_size() from the training process, or use "
            "EchoDataset, which resolves them there"
        )
    rank, world_size = (rank or 0), (world_size or 1)
    if not 0 <= rank < world_size:
        raise ValueError(
            f"rank must be in [0, world_size={world_size}), got {rank}; pass the process's "
            "DDP rank, or leave both None to read them from torch.distributed"
        )
    worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
    return rank * workers + worker, world_size * workers


class Part:
    """Which part of the data one copy of an ``EchoDataset`` reads, decided per iteration.

    Its rank's part (``rank``/``world_size`` as given, else ``torch.distributed``'s),
    or where a trainer splits the data itself (accelerate's prepared loaders, so the
    Hugging Face ``Trainer``) what that trainer has it read
    (:func:`dataecho.torch.accelerated.reads_as`): under accelerate's sliced mode its
    process's part, in the slots accelerate keeps for it (:attr:`slots`). Pickled for
    spawned DataLoader workers, which have no process group, it carries the ranks and
    slots resolved here.

    Args:
        rank: the DDP rank, with ``world_size``; both None: from ``torch.distributed``.
        world_size: the number of DDP ranks, with ``rank``.

    Example:
        >>> part = Part(1, 2)
        >>> part.decide([1, 2]), part.read_as
        ((1, 2), (1, 2))
    """

    def __init__(self, rank: int | None, world_size: int | None) -> None:
        self.rank, self.world_size = check_rank(rank, world_size)
        #: What the live iteration reads as: (rank, world_size), or None for nothing.
        self.read_as: tuple[int | None, int | None] | None = (self.rank, self.world_size)
        #: The slots its process keeps of a sliced stream, or None: it hands over all.
        self.slots: Slots | None = None
        self.pinned: Slots | None = None  # the slots a spawned worker was pickled with
        self.idle = False  # a spawned worker of a process that reads nothing
        self.final = True  # the decision cannot change (see decide)
        self.seen = accelerated.SeenSplit()  # how a trainer splits it, as any copy saw
        #: Whether the loader reading it is in an ``EqualSteps``, which ends every
        #: process's epoch at the same step (set by ``EqualSteps``).
        self.agreed = False

    def decide(self, dataset: object) -> tuple[int | None, int | None] | None:
        """Decides (and returns) what ``dataset`` reads now: see :attr:`read_as`.

        :attr:`final` says whether the decision can still change: not while a trainer
        may yet record the loader that splits the data (in the training process).
        """
        if self.idle:
            self.read_as, self.final = None, True
            return None
        self.read_as, final, self.slots = accelerated.reads_as(
            dataset, self.rank, self.world_size, resolve_rank(None, None)[0], self.seen)
        if self.pinned is not None and self.slots is None:  # a spawned worker: no record
            self.slots = self.pinned
        self.final = final or get_worker_info() is not None  # workers start split
        return self.read_as

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["idle"] = self.read_as is None
        state["pinned"] = self.slots
        state["rank"], state["world_size"] = resolve_rank(*(self.read_as or (None, None)))
        return state
