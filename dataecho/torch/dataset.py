"""Example echoing inside DataLoader workers, as an ``IterableDataset``."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict
from typing import Any, Literal, cast

from torch.utils.data import IterableDataset, get_worker_info

from .._checks import check_augment, check_bool, check_positive_int, check_seed
from ..factor import Auto, as_factor
from ..iterable import as_stage
from ..loop import Epochs
from ..map import Map, fn_name
from ..pipeline import pipeline
from ..shard import Shard
from ..shuffle import window_of
from ..source import Source
from ..stage import Stage, State
from ..stats import EchoStats
from .accelerated import split_of
from .sharding import check_rank, resolve_rank, shard_of
from .tally import Tally
from .workers import EpochCounter, SharedCounts

Sharding = Literal["stream", "dataecho"]


class EchoDataset(IterableDataset[Any]):
    """Echoes each example inside DataLoader workers: map-style data sets and streams.

    Each worker reads its part of the data, repeats every example ``factor`` times
    after the expensive read/decode and before (or after) ``augment``, and spreads the
    copies with a per-worker shuffle window; the DataLoader batches. Every copy is
    augmented with a generator keyed by (seed, epoch, rank, worker, position), so no
    two copies, workers or ranks share draws.

    Data sets: a map-style data set (``len`` and ``[i]``) is read in a per-epoch
    permutation; worker ``w`` of rank ``r`` reads shard ``r * num_workers + w`` of
    ``world_size * num_workers``. A stream (any ``IterableDataset`` or re-iterable: a
    ``webdataset.WebDataset``/``DataPipeline``, a Hugging Face ``datasets``
    ``IterableDataset``, a dataecho stage) is iterated once per epoch in each worker,
    and ``sharding`` says who splits it: ``"stream"``, the stream itself (WebDataset
    splits shards by worker, and by rank with ``nodesplitter=wds.split_by_node``;
    Hugging Face splits shards by worker, and by rank after
    ``datasets.distributed.split_dataset_by_node``); ``"dataecho"``, every worker reads
    the whole stream and keeps every ``world_size * num_workers``-th example
    (:class:`dataecho.Shard`: exact for any stream, but each example is read by every
    worker). Default: ``"stream"`` for WebDataset and Hugging Face streams; other
    streams must say which when read by more than one worker or rank. A stream with
    ``set_epoch`` is told the epoch before each pass. :class:`dataecho.TarShards` (and
    ``Map`` stages over it, such as a decode) is split by whole shards (its
    ``with_reader``), and checkpoints its position, so it resumes without re-reading.

    Equal steps under DDP: shards of a map-style data set differ by at most one
    example; ``drop_remainder=True`` makes them equal, and with an integer ``factor``
    every rank takes the same number of steps (give DDP a step budget otherwise, and
    for streams, whose parts are as long as the stream makes them).

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
    epoch, since the DataLoader dropped the examples of the batch it was filling. To
    go on, restore the checkpoint taken before the error, or start a new iteration
    (it reads the epoch again). A state is not taken after such an error.

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
            none; default the copies of 1,000 examples, ``ceil(1000 * factor)``:
            :func:`dataecho.shuffle.window_of`); with ``Auto``, pass
            ``Auto(buffer_size=...)``, the examples echoes are drawn from, instead.
            Memory: before augmentation the window holds that many augmented copies
            (at factor 4 and 224x224 RGB uint8, about 600 MB per worker by default);
            pass a smaller window where memory is short.
        shuffle: permute a map-style data set each epoch (default True); a stream keeps
            its own order (shuffle the stream itself).
        seed: the one seed; each stage derives its own stream from it.
        drop_remainder: drop ``len(dataset) % (world_size * num_workers)`` examples of
            each epoch of a map-style data set (a different few each epoch) so every
            shard has the same length.
        rank: the DDP rank, with ``world_size``; default (both None): from
            ``torch.distributed``, read in the training process when iteration starts
            or when the DataLoader hands this object to its workers, so ``spawn`` and
            ``forkserver`` workers, which have no process group, still read their
            rank's part.
        world_size: the number of DDP ranks, with ``rank``.
        sharding: who splits a stream across workers and ranks (see above).

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
        shuffle: bool | None = None,
        seed: int = 0,
        drop_remainder: bool = False,
        rank: int | None = None,
        world_size: int | None = None,
        sharding: Sharding | None = None,
    ) -> None:
        self.stream = _is_stream(dataset)
        check_augment(augment)
        if echo not in ("before_augmentation", "after_augmentation"):
            raise ValueError(
                f"echo must be 'before_augmentation' or 'after_augmentation' here, got "
                f"{echo!r}; for batch echoing wrap the DataLoader in dataecho.torch.EchoBatches"
            )
        factor = as_factor(factor)  # type: ignore[arg-type]
        if isinstance(factor, Auto):
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
        self.rank, self.world_size = check_rank(rank, world_size)
        seed = check_seed(seed)
        drop_remainder = check_bool(drop_remainder, "drop_remainder")
        if self.stream:
            if shuffle is not None or drop_remainder:
                given = "shuffle" if shuffle is not None else "drop_remainder"
                raise ValueError(
                    f"{given} configures how a map-style data set is read, and dataset is "
                    f"a stream ({type(dataset).__name__}), which keeps its own order and "
                    f"length; got {given}={shuffle if shuffle is not None else True!r}; "
                    f"drop {given} and configure the stream itself")
            self.sharding = _check_sharding(dataset, sharding)
            _check_node_split(dataset, self.world_size)
        else:
            if sharding is not None:
                raise ValueError(
                    f"sharding says who splits a stream, and dataset is a map-style data "
                    f"set that dataecho shards by index; got sharding={sharding!r}; drop it")
            if len(dataset) == 0:  # type: ignore[arg-type]
                raise ValueError(
                    "dataset is empty (len(dataset) == 0); pass a data set with examples")
            shuffle = True if shuffle is None else check_bool(shuffle, "shuffle")
            self.sharding = None
            if self.rank is not None and self.world_size is not None:
                Source.check_shards(len(dataset), self.rank, self.world_size,  # type: ignore[arg-type]
                                    drop_remainder)
        # factor 1 is the baseline: no echo stage, the same shuffle window.
        self.kwargs: dict[str, Any] = dict(
            augment=augment, echo=None if factor == 1 else echo,
            factor=None if factor == 1 else factor, batch_size=None, seed=seed)
        if not isinstance(factor, Auto):
            # By default 1,000 distinct examples, so factor copies each (window_of).
            self.kwargs["buffer_size"] = check_positive_int(
                window_of(1000, factor) if buffer_size is None else buffer_size,
                "buffer_size")
        if not self.stream:
            self.kwargs.update(shuffle=shuffle, num_epochs=1, drop_remainder=drop_remainder)
        self.dataset = dataset
        self._repr = _describe(dataset, {**self.kwargs, "echo": echo, "factor": factor})
        # The one epoch loop, with its epoch in shared memory: the worker copies of an
        # iteration agree on it, and each new iteration reads the next, also in new
        # copies (Lightning never calls set_epoch on an IterableDataset).
        self._epochs = EpochCounter()
        self._loop = Epochs(self._build, self._epochs, mark_end=True)
        self._counts = SharedCounts()  # what the workers counted, for stats()
        # The number of a checkpoint loaded in the training process: every iteration's
        # copies hold it, but only the first iteration after the load resumes it.
        self._load: int | None = None
        # A read error of the live iteration: its position counts examples the
        # DataLoader dropped with the batch it was filling, so no state is taken now.
        self._failed: Exception | None = None
        self._read_as = (self.rank, self.world_size)  # as the live iteration reads
        self._idle = False  # a worker of a process that accelerate's dispatcher skips
        #: How a loader prepared by accelerate splits this data set ("dispatched" or
        #: "sliced"), once seen, else None: :func:`dataecho.torch.stats_over_ranks`
        #: reads it.
        self.accelerate_split: str | None = None

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
        self.accelerate_split = split
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
        return Tally(self._pipeline(epoch))

    def _pipeline(self, epoch: int) -> Stage[Any]:
        rank, world_size = self._read_as
        shard, shards = shard_of(rank, world_size)
        if not self.stream:
            return pipeline(self.dataset, **self.kwargs,  # type: ignore[arg-type]
                            epoch=epoch, shard_index=shard, num_shards=shards)
        reader = _reader_for(self.dataset, shard, shards, epoch)
        if reader is not None:  # a reader that splits whole shards: TarShards
            return pipeline(reader, **self.kwargs, epoch=epoch, shard_index=shard,
                            num_shards=shards)
        set_epoch = getattr(self.dataset, "set_epoch", None)
        if callable(set_epoch):
            set_epoch(epoch)
        _check_node_split(self.dataset, resolve_rank(rank, world_size)[1])
        source = as_stage(self.dataset, "dataset")
        if shards > 1:
            if self.sharding is None:
                raise ValueError(
                    f"sharding must say who splits the stream ({type(self.dataset).__name__}) "
                    f"across the {shards} readers (DataLoader workers times ranks), got None; "
                    "pass sharding='stream' if the stream splits itself by worker and rank "
                    "(reads get_worker_info()), or sharding='dataecho' to have every reader "
                    "read it all and keep its share")
            if self.sharding == "dataecho":
                source = Shard(source, shard, shards)
        return pipeline(source, **self.kwargs, epoch=epoch, shard_index=shard,
                        num_shards=shards)

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
        check_empty = self.stream and not loop.pending  # a restored pass may be empty
        restoring = loop.pending
        try:
            stage = loop.start()
        except ValueError as error:
            if not restoring:
                raise
            raise ValueError(
                f"EchoDataset cannot resume this checkpoint here ({error}): it was taken "
                "with another number of DataLoader workers or ranks; resume with the ones "
                "it was taken with, or checkpoint with torchdata's StatefulDataLoader, "
                "which saves and restores every worker") from error
        if loop.ended:  # restored after this epoch's end: nothing is left
            return iter(())
        return self._hand_out(cast(Tally, stage), check_empty)

    def _hand_out(self, tally: Tally, check_empty: bool) -> Iterator[Any]:
        return _Handout(self, tally, check_empty)

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
        state = self._loop.state_dict()
        if get_worker_info() is None:
            # The training process sees its workers' counts only in shared memory.
            fresh, emitted = self._counts.total()
            own = self._loop.stats()
            extra = EchoStats(fresh - own.fresh_examples, emitted - own.emitted_examples,
                              fresh - own.fresh_examples, emitted - own.emitted_examples, None)
            state["done"] = asdict(EchoStats(**state["done"]) + extra)
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Makes the next iteration resume the checkpointed epoch where it stopped.

        Raises:
            TypeError: ``state`` is not a dict.
            ValueError: a key is missing or a value is malformed.
        """
        self._loop.load_state_dict(state, "EchoDataset")
        self._failed = None
        # Loaded in a worker (a StatefulDataLoader's restore), the state is that worker's
        # own; loaded here, the copies of every later iteration hold it (see __iter__).
        self._load = None if get_worker_info() is not None else self._epochs.loaded()
        if get_worker_info() is None:
            # The training process carries the totals; a StatefulDataLoader's restored
            # workers count from the restore on.
            counts = self._loop.stats()
            self._counts.reset(counts.fresh_examples, counts.emitted_examples)

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
        fresh, emitted = self._counts.total()
        return EchoStats(fresh, emitted, fresh, emitted, None)

    def __repr__(self) -> str:
        return f"EchoDataset({self._repr})"


class _Handout(Iterator[Any]):
    """One iteration's examples, counted as handed over; a read error sticks.

    Not a generator: an error raised through a generator ends it, so the DataLoader's
    next call would see a normal end of the epoch. The DataLoader also drops the
    examples of the batch it was filling when a read fails, so going on after an error
    would lose them silently: every later call raises again, naming the first error.
    """

    def __init__(self, owner: EchoDataset, tally: Tally, check_empty: bool) -> None:
        self._owner, self._tally, self._check_empty = owner, tally, check_empty
        self._publish = owner._counts.publisher(tally.counts)
        self._error: Exception | None = None
        self._done = False

    def __next__(self) -> Any:
        if self._error is not None:
            raise RuntimeError(
                f"this EchoDataset iteration stopped at a read error "
                f"({type(self._error).__name__}: {self._error}) and cannot go on: the "
                "DataLoader dropped the examples of the batch it was filling; restore the "
                "checkpoint taken before the error (or start a new iteration, which "
                "reads the epoch again)") from self._error
        if self._done:
            raise StopIteration
        try:
            item = next(self._tally)
        except StopIteration:
            self._finish()
            raise
        except Exception as error:
            self._error = error
            self._owner._failed = error
            raise
        self._publish()
        return item

    def _finish(self) -> None:
        self._done = True
        self._publish()
        loop = self._owner._loop
        if loop.stage is self._tally:  # not replaced by set_epoch or a restore meanwhile
            loop.end()
        if self._check_empty and not self._tally.yields:
            raise ValueError(_empty_message())


def _is_stream(dataset: object) -> bool:
    """Whether ``dataset`` is read as a stream (iterated) rather than indexed."""
    if isinstance(dataset, IterableDataset | Stage):
        return True
    if hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__"):
        return False
    if isinstance(dataset, Iterator):
        raise TypeError(
            f"dataset must be re-iterable (iterated once per epoch in every worker), got a "
            f"one-shot iterator ({type(dataset).__name__}); pass the data set or stream "
            "itself (an IterableDataset, a list), not iter(...) or a generator")
    if isinstance(dataset, Iterable):
        return True
    raise TypeError(
        f"dataset must be a map-style data set (len() and integer indexing) or a stream "
        f"(an IterableDataset or another re-iterable), got {type(dataset).__name__}; pass "
        "a torch Dataset, a list, a WebDataset or a Hugging Face IterableDataset")


def _splits_itself(dataset: object) -> bool:
    """Streams of libraries that split themselves by DataLoader worker (and rank)."""
    module = type(dataset).__module__.split(".")[0]
    return module in ("webdataset", "datasets")


def _check_sharding(dataset: object, sharding: object) -> Sharding | None:
    if sharding is not None and sharding not in ("stream", "dataecho"):
        raise ValueError(
            f"sharding must be 'stream' (the stream splits itself by worker and rank), "
            f"'dataecho' (every reader keeps every n-th example) or None, got {sharding!r}; "
            "pass sharding='stream' for WebDataset or Hugging Face streams")
    if _reader_for(dataset, 0, 1, 0, probe=True) is not None:
        if sharding == "stream":
            raise ValueError(
                f"{type(dataset).__name__} is split by dataecho, one reader of whole shards "
                f"per worker and rank (its with_reader()), got sharding='stream'; drop "
                "sharding")
        return "dataecho"
    if sharding is None and _splits_itself(dataset):
        return "stream"
    return sharding


def _check_node_split(dataset: object, world_size: int | None) -> None:
    """Refuses a Hugging Face stream that every rank would read whole (duplicates)."""
    hf = type(dataset).__module__.split(".")[0] == "datasets"
    # datasets records split_dataset_by_node in this attribute (checked on 2.x-5.x);
    # a version without it is not checked rather than refused.
    if (hf and world_size is not None and world_size > 1 and hasattr(dataset, "_distributed")
            and getattr(dataset, "_distributed", None) is None):
        raise ValueError(
            f"dataset is a Hugging Face stream that every one of the {world_size} ranks would "
            "read whole, duplicating every example; split it first with "
            "datasets.distributed.split_dataset_by_node(dataset, rank=rank, "
            "world_size=world_size)")


def _reader_for(stream: object, shard_index: int, num_shards: int, epoch: int, *,
                probe: bool = False) -> Any:
    """The stream rebuilt for one reader of whole shards, or None if it cannot be.

    A stage with ``with_reader`` (``TarShards``) gives its own reader; ``Map`` stages over
    one (a decode) are rebuilt over that reader with the same function and seed.
    """
    if isinstance(stream, Map):
        inner = _reader_for(stream.upstream, shard_index, num_shards, epoch, probe=probe)
        if inner is None or probe:
            return inner
        return Map(inner, stream.fn, seed=stream.seed, random=stream.random)
    with_reader = getattr(stream, "with_reader", None)
    if not callable(with_reader):
        return None
    return stream if probe else with_reader(shard_index, num_shards, epoch)


def _describe(dataset: object, kwargs: Mapping[str, Any]) -> str:
    """The repr's arguments, without building a pipeline (a Source holds a permutation)."""
    size = f" of {len(dataset)}" if hasattr(dataset, "__len__") else ""
    head = repr(dataset) if isinstance(dataset, Stage) else f"<{type(dataset).__name__}{size}>"
    args = [head, f"echo={kwargs['echo']!r}", f"factor={kwargs['factor']!r}"]
    if kwargs["augment"] is not None:
        args.append(f"augment={fn_name(kwargs['augment'])}")
    if "buffer_size" in kwargs:
        args.append(f"buffer_size={kwargs['buffer_size']!r}")
    args.append(f"seed={kwargs['seed']!r}")
    return ", ".join(args)


def _empty_message() -> str:
    info = get_worker_info()
    where = ("the training process" if info is None
             else f"DataLoader worker {info.id} of {info.num_workers}")
    return (f"dataset yielded no examples in {where} for a whole epoch: the stream is "
            "empty, or this reader's part of it is (fewer stream shards than DataLoader "
            "workers times ranks); check the stream's files, or use fewer workers")
