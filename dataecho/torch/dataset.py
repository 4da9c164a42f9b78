"""Example echoing inside DataLoader workers, as an ``IterableDataset``."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict
from typing import Any, Literal, cast

from torch.utils.data import IterableDataset, get_worker_info

from .._checks import check_augment, check_positive_int, check_seed
from ..factor import Auto, as_factor, most_copies
from ..loop import Epochs
from ..map import fn_name
from ..pipeline import pipeline
from ..readers import as_stage
from ..source import Source
from ..stage import Stage, State, StateMismatch
from ..stats import EchoStats
from ..stride import Shard
from ..variants import EXAMPLE_LEVEL, check_variant
from .accelerated import SeenSplit, Split, split_of
from .handout import Handout, Tally
from .ranks import check_rank, resolve_rank, shard_of
from .reading import (
    Indexed,
    Streamed,
    check_node_split,
    inexact_resume,
    read_of,
    reader_for,
)
from .workers import EpochCounter, SharedCounts


class EchoDataset(IterableDataset[Any]):
    """Echoes each example inside DataLoader workers: map-style data sets and streams.

    Each worker reads its part of the data, repeats every example ``factor`` times
    after the expensive read/decode and before (or after) ``augment``, and spreads the
    copies with a per-worker shuffle window; the DataLoader batches. Every copy is
    augmented with a generator keyed by (seed, epoch, rank, worker, position), so no
    two copies, workers or ranks share draws.

    Data sets: a map-style data set (``len`` and ``[i]``) is read in a per-epoch
    permutation, each worker of each rank its shard (``read=Indexed(shuffle=...,
    drop_remainder=...)``). A stream (any ``IterableDataset`` or re-iterable: a
    ``webdataset.WebDataset``/``DataPipeline``, a Hugging Face ``datasets``
    ``IterableDataset``, LitData's or Mosaic's ``StreamingDataset``, a dataecho stage)
    is iterated once per epoch in each worker, and ``read=Streamed(split=...)`` says
    who splits it across workers and ranks (:class:`dataecho.torch.Streamed`: the
    stream itself, or dataecho; WebDataset, Hugging Face and :class:`dataecho.TarShards`
    are recognised). A stream with ``set_epoch`` is told the epoch before each pass.
    ``TarShards`` (and ``Map`` stages over it, such as a decode) is split by whole
    shards, and checkpoints its position, so it resumes without re-reading.

    Equal steps under DDP: shards of a map-style data set differ by at most one
    example; ``Indexed(drop_remainder=True)`` makes them equal, and with an integer
    ``factor`` every rank takes the same number of steps (give DDP a step budget
    otherwise, and for streams, whose parts are as long as the stream makes them).
    Under accelerate's prepared loaders and the Hugging Face ``Trainer``, accelerate
    splits the data itself, and this data set reads the whole epoch where accelerate
    has it read (:mod:`dataecho.torch.accelerated`).

    Epochs: each new iteration of the DataLoader reads the next epoch by itself, with
    any number of workers, persistent or not (the counter is in shared memory, so new
    worker copies of this object see it; Lightning never calls ``set_epoch`` on an
    ``IterableDataset``). :meth:`set_epoch` sets the epoch the next iteration reads.

    Checkpoints: with ``num_workers=0``, :meth:`state_dict` resumes exactly; resume
    the epoch loop at ``state["epoch"]``. With workers, use torchdata's
    ``StatefulDataLoader``, which calls ``state_dict`` inside each worker. A stream
    with its own ``state_dict``/``load_state_dict`` (Hugging Face, torchdata) resumes
    from its state; one without (WebDataset) is re-iterated from the epoch's start and
    the examples already consumed are skipped: exact when its order is seeded, and it
    re-reads that part of the epoch.

    Read errors: an error while reading reaches the training loop with its type (from
    a worker, as the DataLoader re-raises it), and the iteration stops there: every
    later batch of it raises a ``RuntimeError`` naming the error, never a shorter
    epoch, since the DataLoader dropped the examples of the batch it was filling. An
    interrupt inside a read (``KeyboardInterrupt`` in a notebook) stops it the same
    way. To read the rest of the epoch, restore the checkpoint taken before the error,
    or call :meth:`set_epoch` with the same epoch and iterate again (it reads the whole
    epoch again). A state is not taken after such an error.

    Adaptive echoing (``factor=dataecho.Auto(...)``) is decided in each worker: a thread
    reads the worker's part of the stream ahead, and the worker echoes a recent example
    (augmented anew) only while its next fresh one is not ready; the DataLoader's bounded
    prefetch is the back-pressure, so a worker that is ahead of the training loop waits
    instead of echoing. No example is used more than ``max_factor`` times. The realised
    factor, and so the number of steps, then differ between ranks: wrap the loader in
    :class:`dataecho.torch.distributed.EqualSteps` under DDP.

    Args:
        dataset: a map-style data set of decoded examples, or a stream (see above).
        augment: ``augment(example)`` or ``augment(example, rng)`` (numpy Generator
            keyed by seed, epoch, shard and position), or None.
        echo: ``"before_augmentation"`` (copies augmented independently, the paper's
            best) or ``"after_augmentation"`` (identical copies).
        factor: echo factor >= 1, fractional allowed; 1 for no echoing (a baseline); or
            ``dataecho.Auto(max_factor=..., buffer_size=...)`` (``"auto"``) for adaptive
            echoing in the workers.
        buffer_size: per-worker shuffle window after the echo stage, in items (1 =
            none; default the copies of 1,000 examples, ``ceil(1000 * factor)``, at
            most 65,536: :func:`dataecho.shuffle.window_of`; at factor 1, the baseline,
            none unless given, as in :func:`dataecho.pipeline`); with ``Auto``, pass
            ``Auto(buffer_size=...)``, the examples echoes are drawn from, instead.
            Memory: before augmentation the window holds that many augmented copies
            (at factor 4 and 224x224 RGB uint8, about 600 MB per worker by default);
            pass a smaller window where memory is short.
        seed: the one seed; each stage derives its own stream from it.
        rank: the DDP rank, with ``world_size``; default (both None): from
            ``torch.distributed``, read in the training process when iteration starts
            or when the DataLoader hands this object to its workers, so ``spawn`` and
            ``forkserver`` workers, which have no process group, still read their
            rank's part.
        world_size: the number of DDP ranks, with ``rank``.
        read: how to read ``dataset``: :class:`dataecho.torch.Indexed` for a map-style
            data set (its order and length), :class:`dataecho.torch.Streamed` for a
            stream (who splits it); None: that kind's defaults.

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
        dataset: Sequence[Any] | Iterable[Any],
        *,
        augment: Callable[..., Any] | None = None,
        echo: Literal["before_augmentation", "after_augmentation"] = "before_augmentation",
        factor: float | Auto | str = 2.0,
        buffer_size: int | None = None,
        seed: int = 0,
        rank: int | None = None,
        world_size: int | None = None,
        read: Indexed | Streamed | None = None,
    ) -> None:
        check_augment(augment)
        self.dataset, self.augment, self.seed = dataset, augment, check_seed(seed)
        self.read = read_of(dataset, read)
        self.echo, self.factor, self.buffer_size = _echo_of(echo, factor, buffer_size)
        self.rank, self.world_size = check_rank(rank, world_size)
        if isinstance(self.read, Streamed):
            check_node_split(dataset, self.world_size)
        elif self.rank is not None and self.world_size is not None:
            Source.check_shards(len(dataset), self.rank, self.world_size,  # type: ignore[arg-type]
                                self.read.drop_remainder)
        # One epoch loop, its epoch in shared memory: the worker copies of an iteration
        # agree on it, and each new iteration reads the next (Lightning never calls
        # set_epoch on an IterableDataset).
        self._epochs = EpochCounter()
        self._loop = Epochs(self._build, self._epochs, mark_end=True)
        self._counts = SharedCounts()  # what the workers counted, for stats()
        self._load: int | None = None  # a checkpoint loaded here: one iteration resumes it
        self._failed: BaseException | None = None  # a read error of the live iteration
        self._read_as = (self.rank, self.world_size)  # as the live iteration reads
        self._idle = False  # a worker of a process that accelerate's dispatcher skips
        self._split = SeenSplit()  # how accelerate splits it, as any copy saw it
        self._inexact = inexact_resume(dataset)  # warned at the first checkpoint

    def __getstate__(self) -> dict[str, Any]:
        # Pickled for DataLoader workers (spawn, forkserver): they have no process group,
        # so the rank and world size are read here, in the training process.
        state = self.__dict__.copy()
        read_as = self._ranks()
        state["_idle"] = read_as is None
        state["rank"], state["world_size"] = resolve_rank(*(read_as or (None, None)))
        return state

    def _ranks(self) -> tuple[int | None, int | None] | None:
        """The rank and world size to read as, or None if this process reads nothing.

        accelerate's prepared loaders split the data across processes themselves
        (:mod:`dataecho.torch.accelerated`): process 0 reads for all (the others'
        iterations, which accelerate starts but never reads, read nothing), or every
        process reads all and keeps its slice. Reading one rank's part there too would
        train that part alone.
        """
        if self._idle:
            return None
        split = split_of(self)
        if split is None:
            return self.rank, self.world_size
        self._split.record(split)
        if self.world_size not in (None, 1):
            how = ("process 0 reads the data for every process" if split == "dispatched"
                   else "every process reads the data and keeps its slice")
            raise ValueError(
                f"EchoDataset(rank={self.rank}, world_size={self.world_size}) is read by a "
                f"loader that accelerate prepared, which splits the data itself ({how}), so "
                f"each rank would train on a part of its own part; drop rank and "
                "world_size (EchoDataset then reads the whole epoch under accelerate)")
        if split == "dispatched" and (resolve_rank(None, None)[0] or 0) != 0:
            return None
        return 0, 1

    @property
    def accelerate_split(self) -> Split | None:
        """How a loader accelerate prepared splits this data set, once seen, else None.

        ``"dispatched"`` or ``"sliced"``, seen by this object or any DataLoader worker
        copy of it: :func:`dataecho.torch.distributed.stats_over_ranks` reads it.
        """
        return self._split.get()

    def set_epoch(self, epoch: int) -> None:
        """Sets the epoch whose permutation the next iteration reads.

        A checkpoint loaded for another epoch is dropped (its epoch is over or skipped);
        one loaded for this epoch still resumes where it stopped.

        Raises:
            TypeError: ``epoch`` is not an int.
            ValueError: ``epoch`` is negative.
        """
        self._ranks()  # accelerate's loaders call this first, in the training process
        self._loop.set_epoch(epoch)

    def _build(self, epoch: int) -> Tally:
        return Tally(self._pipeline(epoch), shard_of(*self._read_as))

    def _pipeline(self, epoch: int) -> Stage[Any]:
        rank, world_size = self._read_as
        shard, shards = shard_of(rank, world_size)
        common: dict[str, Any] = dict(
            augment=self.augment, echo=self.echo, factor=self.factor, batch_size=None,
            buffer_size=self.buffer_size, seed=self.seed, epoch=epoch, shard_index=shard,
            num_shards=shards)
        if isinstance(self.read, Indexed):
            return pipeline(self.dataset, shuffle=self.read.shuffle,  # type: ignore[arg-type]
                            drop_remainder=self.read.drop_remainder, **common)
        return pipeline(self._stream(epoch, shard, shards, world_size), **common)

    def _stream(self, epoch: int, shard: int, shards: int, world_size: int | None) -> Stage[Any]:
        """This reader's part of the stream, for one epoch."""
        reader = reader_for(self.dataset, shard, shards, epoch)
        if reader is not None:  # a reader that splits whole shards: TarShards
            return reader  # type: ignore[no-any-return]
        set_epoch = getattr(self.dataset, "set_epoch", None)
        if callable(set_epoch):
            set_epoch(epoch)
        check_node_split(self.dataset, resolve_rank(None, world_size)[1])
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

    def __iter__(self) -> Iterator[Any]:
        # Eager, not a generator: the epoch is claimed and the pipeline built (and
        # restored) now, so a state StatefulDataLoader takes before the first example
        # already names this iteration's epoch.
        loop = self._loop
        self._failed = None
        read_as = self._ranks()
        if read_as is None:
            return iter(())
        self._read_as = read_as
        if self._load is not None:
            if loop.pending and not self._epochs.take(self._load):
                loop.drop_pending()  # an earlier iteration resumed it
            self._load = None
        # A restored pass may be empty; a whole one of a stream may not.
        check_empty = isinstance(self.read, Streamed) and not loop.pending
        restoring = loop.pending
        try:
            stage = loop.start()
        except ValueError as error:
            if not restoring:
                raise
            raise ValueError(_refusal(error)) from error
        if loop.ended:  # restored after this epoch's end: nothing is left
            return iter(())
        return self._hand_out(cast(Tally, stage), check_empty, loop.epoch)

    def _finish(self, tally: Tally) -> None:
        if self._loop.stage is tally:  # not replaced by set_epoch or a restore meanwhile
            self._loop.end()

    def _fail(self, error: BaseException) -> None:
        self._failed = error

    def _hand_out(self, tally: Tally, check_empty: bool, epoch: int) -> Iterator[Any]:
        renew = self._renew if get_worker_info() is None else None
        return iter(Handout(tally, self._counts.publisher, self._finish, self._fail,
                            check_empty, renew, epoch))

    def _renew(self, tally: Tally) -> Tally | None:
        """The pipeline an iteration reads from its first item: ``tally`` or a new one.

        accelerate's prepare takes a stateful loader's state, which begins an iteration,
        before it records the loader that decides how the data is split across
        processes: an iteration not read yet is built again for the split it has now.
        (Workers get their rank when the DataLoader starts them: nothing to renew.)
        """
        if self._loop.stage is not tally:
            return tally  # set_epoch or a restore replaced it: read on as before
        read_as = self._ranks()
        if read_as == self._read_as:
            return tally
        if read_as is None:  # a process accelerate's dispatcher leaves idle
            return None
        self._read_as = read_as
        return cast(Tally, self._loop.rebuild())

    def state_dict(self) -> State:
        """The epoch loop's state: the epoch, the position in it, and the counts.

        ``"stage"`` is None for the epoch's start, ``"ended"`` after its end, or the
        pipeline's state. The state after an epoch's last batch names that epoch whether
        or not the DataLoader saw its end inside that batch (a partial last batch), so
        resuming the epoch loop at ``state["epoch"]`` is exact with and without
        ``set_epoch``: the first iteration reads what is left of that epoch, nothing
        when it ended. ``"done"`` and ``"counts"`` are the finished epochs' and this
        epoch's counts: in a worker, that worker's; in the training process, also what
        its DataLoader workers counted (as finished).
        """
        if self._failed is not None:
            raise RuntimeError(
                f"EchoDataset cannot checkpoint an iteration that stopped at a read error "
                f"({type(self._failed).__name__}: {self._failed}): its position counts the "
                "examples the DataLoader dropped with the batch it was filling, so a "
                "restore would skip them; keep the checkpoint taken before the error")
        if self._inexact is not None:
            warnings.warn(f"EchoDataset's checkpoint will not resume exactly: "
                          f"{self._inexact}", UserWarning, stacklevel=2)
            self._inexact = None  # once per copy
        state = self._loop.state_dict()
        # What other copies counted is in shared memory only: in the training process,
        # every worker's; in a worker, the earlier iterations' of its worker id (new
        # copies each iteration without persistent workers).
        in_worker = get_worker_info() is not None
        fresh, emitted = self._counts.own() if in_worker else self._counts.total()
        own = self._loop.stats()
        extra = EchoStats.of_examples(fresh - own.fresh_examples, emitted - own.emitted_examples)
        state["done"] = asdict(EchoStats(**state["done"]) + extra)
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Makes the next iteration resume the checkpointed epoch where it stopped.

        Raises:
            TypeError: ``state`` is not a dict.
            ValueError: a key is missing or a value is malformed.
        """
        self._loop.load_state_dict(state, "EchoDataset", most_copies=most_copies(self.factor))
        self._failed = None
        # Loaded in a worker (a StatefulDataLoader's restore), the state is that worker's
        # own; loaded here, the copies of every later iteration hold it (see __iter__).
        in_worker = get_worker_info() is not None
        self._load = None if in_worker else self._epochs.loaded()
        # Loaded here, the state carries the totals of every worker; loaded in a worker
        # (a StatefulDataLoader's restore), that worker's, which its slot takes up.
        counts = self._loop.stats()
        (self._counts.restore if in_worker else self._counts.reset)(
            counts.fresh_examples, counts.emitted_examples)

    def stats(self) -> EchoStats:
        """Fresh and emitted examples this dataset handed to the DataLoader, all epochs.

        Counted as examples leave the dataset (summed over the DataLoader workers of
        this process): ``emitted_examples`` counts every copy handed over,
        ``fresh_examples`` the examples whose first copy was, so copies still waiting in
        the shuffle window count in neither, and a run stopped mid-epoch reports what it
        handed over. The DataLoader's own queue sits after that point: the counts
        include batches the workers prefetched but the loop has not taken yet (or never
        will, if it stops early), and the examples ``DataLoader(drop_last=True)`` drops
        from each worker's last, incomplete batch. For what the steps used, count the
        batches' lengths in the loop.

        Counted since construction, plus the totals of a checkpoint loaded with
        :meth:`load_state_dict`, in this process or (a ``StatefulDataLoader``'s restore)
        in its workers. With ``factor=Auto()`` the adaptive stage counts them itself:
        nothing reorders its copies after it.

        Example:
            >>> ds = EchoDataset(list(range(5000)), factor=2, seed=0)
            >>> examples = iter(ds)
            >>> batch = [next(examples) for _ in range(8)]  # its shuffle window read 2,000
            >>> ds.stats().emitted_examples, 4 <= ds.stats().fresh_examples <= 8
            (8, True)
        """
        fresh, emitted = self._counts.total()
        return EchoStats.of_examples(fresh, emitted)

    def __repr__(self) -> str:
        head = (repr(self.dataset) if isinstance(self.dataset, Stage)
                else f"<{type(self.dataset).__name__}{_length(self.dataset)}>")
        args = [head, f"echo={self.echo!r}", f"factor={self.factor!r}"]
        if self.augment is not None:
            args.append(f"augment={fn_name(self.augment)}")
        if self.buffer_size is not None:
            args.append(f"buffer_size={self.buffer_size!r}")
        return f"EchoDataset({', '.join([*args, f'seed={self.seed!r}'])})"


# What differs when a checkpoint's pipeline refuses it, in EchoDataset's words.
_SPLIT = {"reader", "shard_index", "num_shards", "shard"}  # which part a reader reads
_ARGUMENTS = {"factor": "factor", "max_factor": "factor", "min_fresh": "factor",
              "buffer_size": "buffer_size", "seed": "seed", "size": "dataset (its length)",
              "shuffle": "read=Indexed(shuffle=...)",
              "drop_remainder": "read=Indexed(drop_remainder=...)", "fn": "augment",
              "random": "augment", "augment": "augment", "batch_size": "factor",
              "stage": "echo, factor or augment (the pipeline's stages differ)",
              "version": "dataecho version"}


def _refusal(error: ValueError) -> str:
    """Why a checkpoint cannot resume here, naming what differs and its fix."""
    head = f"EchoDataset cannot resume this checkpoint here ({error})"
    if not isinstance(error, StateMismatch):
        return f"{head}; pass the state saved from this EchoDataset's checkpoint"
    if _SPLIT & set(error.fields):
        return (f"{head}: it was taken with another number of DataLoader workers or ranks; "
                "resume with the ones it was taken with, or checkpoint with torchdata's "
                "StatefulDataLoader, which saves and restores every worker")
    names = sorted({_ARGUMENTS.get(field, field) for field in error.fields})
    return (f"{head}: it was taken with another {' and '.join(names)}; construct the "
            "EchoDataset with the arguments it was taken with to resume it")


def _length(dataset: object) -> str:
    return f" of {len(dataset)}" if hasattr(dataset, "__len__") else ""


def _echo_of(echo: object, factor: object, buffer_size: object,
             ) -> tuple[Any, float | Auto, int | None]:
    """``echo``, ``factor`` and the shuffle window after the echo, checked together."""
    check_variant(echo, allowed=EXAMPLE_LEVEL,
                  hint="for batch echoing wrap the DataLoader in dataecho.torch.EchoBatches")
    factor = as_factor(factor)  # type: ignore[arg-type]
    if not isinstance(factor, Auto):  # the default window is pipeline()'s to choose
        return echo, factor, (None if buffer_size is None
                              else check_positive_int(buffer_size, "buffer_size"))
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
    return echo, factor, None
