"""Example echoing inside DataLoader workers, as an ``IterableDataset``."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict
from functools import partial
from typing import Any, Literal

from torch.utils.data import IterableDataset, get_worker_info

from ..factor import Auto, most_copies
from ..loop import Epochs
from ..map import fn_name
from ..source import Source
from ..stage import Stage, State
from ..stats import EchoStats
from ..timing import Sides
from .iteration import Iteration
from .ranks import Part
from .reading import Indexed, Streamed
from .recipe import Recipe
from .streams import reader_of
from .workers import EpochCounter, SharedCounts, SharedTimes


class EchoDataset(IterableDataset[Any]):
    """Echoes each example inside DataLoader workers: map-style data sets and streams.

    Each worker reads its part of the data, repeats every example ``factor`` times
    after the expensive read/decode and before (or after) ``augment``, and spreads the
    copies with a per-worker shuffle window; the DataLoader batches. Every copy is
    augmented with a generator keyed by (seed, epoch, rank, worker, position), so no
    two copies, workers or ranks share draws.

    Data: a map-style data set (``len`` and ``[i]``) is read in a per-epoch permutation,
    each worker of each rank its shard (``read=Indexed(...)``); a stream (an
    ``IterableDataset`` or re-iterable: WebDataset, Hugging Face, LitData, Mosaic,
    :class:`dataecho.TarShards`) is iterated once per epoch in each worker, and
    ``read=Streamed(split=...)`` says who splits it (:mod:`dataecho.torch.reading`).
    Which part a process reads, under DDP or a trainer that splits the data itself
    (the Hugging Face ``Trainer``): :class:`dataecho.torch.ranks.Part`.

    Epochs: each new iteration of the DataLoader reads the next epoch by itself, with
    any number of workers, persistent or not; :meth:`set_epoch` sets the one the next
    iteration reads. Checkpoints: :meth:`state_dict` resumes exactly with
    ``num_workers=0``; with workers, use torchdata's ``StatefulDataLoader``. A read
    error (or an interrupt inside a read) stops the iteration: every later batch of it
    raises, naming the error; restore the checkpoint taken before it, or call
    :meth:`set_epoch` with the same epoch and iterate again. Details and the adaptive
    factor in the workers: the PyTorch guide.

    Args:
        dataset: a map-style data set of decoded examples, or a stream (see above).
        augment: ``augment(example, rng)`` (numpy Generator keyed by seed, epoch, shard
            and position), or ``augment(example)`` (a torchvision or kornia transform),
            run under torch's and Python's global generators seeded for its copy
            (:class:`dataecho.torch.Seeded`); or None.
        echo: ``"before_augmentation"`` (copies augmented independently, the paper's
            best) or ``"after_augmentation"`` (identical copies).
        factor: echo factor >= 1, fractional allowed; 1 for no echoing (a baseline); or
            ``dataecho.Auto(max_factor=..., buffer_size=...)`` (``"auto"``) for adaptive
            echoing in the workers (wrap the loader in
            :class:`dataecho.torch.distributed.EqualSteps` under DDP).
        buffer_size: per-worker shuffle window after the echo stage, in items (1 =
            none; default the copies of 1,000 examples, at most 65,536:
            :func:`dataecho.shuffle.window_of`; none at factor 1 unless given); with
            ``Auto``, pass ``Auto(buffer_size=...)`` instead. Before augmentation the
            window holds that many augmented copies (at factor 4 and 224x224 RGB uint8,
            about 600 MB per worker by default): pass a smaller one where memory is short.
        seed: the one seed; each stage derives its own stream from it.
        rank: the DDP rank, with ``world_size``; both None: from ``torch.distributed``,
            read in the training process (also for ``spawn`` workers).
        world_size: the number of DDP ranks, with ``rank``.
        read: how to read ``dataset``: :class:`dataecho.torch.Indexed` for a map-style
            data set, :class:`dataecho.torch.Streamed` for a stream; None: its defaults.

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
        dataset: Any,
        augment: Callable[..., Any] | None = None,
        *,
        echo: Literal["before_augmentation", "after_augmentation"] = "before_augmentation",
        factor: float | Auto | str = 2.0,
        buffer_size: int | None = None,
        seed: int = 0,
        rank: int | None = None,
        world_size: int | None = None,
        read: Indexed | Streamed | None = None,
    ) -> None:
        #: The arguments, checked: what every epoch's pipeline is built from.
        self.recipe = Recipe.of(dataset, augment, echo, factor, buffer_size, seed, read)
        #: Which part of the data this copy reads (its rank's, or a trainer's split).
        self.part = Part(rank, world_size)
        read, stream = self.recipe.read, None
        if isinstance(read, Indexed) and self.part.world_size is not None:
            Source.check_shards(len(dataset), self.part.rank or 0, self.part.world_size,
                                read.drop_remainder)
        elif isinstance(read, Streamed):
            stream = reader_of(dataset)
            if stream.check is not None:
                stream.check(dataset, self.part.world_size)
        # The epoch in shared memory: the worker copies of an iteration agree on it, and
        # each new iteration reads the next (Lightning never calls set_epoch on an
        # IterableDataset).
        self._epochs = EpochCounter()
        self._times = SharedTimes()  # how long every reader's read and augmentation take
        self._loop = Epochs(partial(self.recipe.tally, self.part, self._times), self._epochs,
                            mark_end=True)
        self._counts = SharedCounts()  # what the workers counted, for stats()
        self._load: int | None = None  # a checkpoint loaded here: one iteration resumes it
        self._live: Iteration | None = None  # the latest iteration of this copy
        # Why the stream's own checkpoint is inexact, warned at the first checkpoint.
        self._inexact = None if stream is None or stream.inexact is None else stream.inexact(
            dataset)

    def __getstate__(self) -> dict[str, Any]:
        # Pickled for DataLoader workers (spawn, forkserver), which have no process
        # group: the part they read is decided here, in the training process.
        self.part.decide(self)
        return {**self.__dict__, "_live": None}  # a live iteration stays here

    def set_epoch(self, epoch: int) -> None:
        """Sets the epoch whose permutation the next iteration reads.

        A checkpoint loaded for another epoch is dropped (its epoch is over or skipped);
        one loaded for this epoch still resumes where it stopped.

        Raises:
            TypeError: ``epoch`` is not an int.
            ValueError: ``epoch`` is negative.
        """
        self.part.decide(self)  # a trainer's loader calls this first, in this process
        self._loop.set_epoch(epoch)

    def __iter__(self) -> Iterator[Any]:
        load, self._load = self._load, None
        self._live = Iteration(self, self._loop, self.part, self._counts, self._epochs, load,
                               stream=isinstance(self.recipe.read, Streamed),
                               place=partial(self.recipe.place, self.part, self._times))
        return iter(self._live)

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
        failed = None if self._live is None else self._live.failed
        if failed is not None:
            raise RuntimeError(
                f"EchoDataset cannot checkpoint an iteration that stopped at a read error "
                f"({type(failed).__name__}: {failed}): its position counts the "
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
        self._loop.load_state_dict(state, "EchoDataset",
                                   most_copies=most_copies(self.recipe.factor))
        self._live = None
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

    def sides(self) -> Sides:
        """Seconds per example on each side of the echo point, over every reader so far.

        ``read_s`` per fresh example read and decoded (the work echoing saves for each
        copy), ``augment_s`` per augmentation call (the work echoing before augmentation
        repeats for every copy; 0.0 without ``augment``), measured in the DataLoader
        workers (and here with ``num_workers=0``) by timing one call in 31. The profiler
        and the demo predict the gain of each factor and variant from them.

        Example:
            >>> ds = EchoDataset(list(range(100)), augment=abs, factor=2, seed=0)
            >>> _ = list(ds)
            >>> sides = ds.sides()
            >>> sides.reads, sides.augments, sides.read_s > 0
            (93, 186, True)
        """
        return self._times.sides()

    def __repr__(self) -> str:
        recipe, data = self.recipe, self.recipe.dataset
        size = f" of {len(data)}" if hasattr(data, "__len__") else ""
        head = repr(data) if isinstance(data, Stage) else f"<{type(data).__name__}{size}>"
        args = [head, f"echo={recipe.echo!r}", f"factor={recipe.factor!r}"]
        if recipe.augment is not None:
            args.append(f"augment={fn_name(recipe.augment)}")
        if recipe.buffer_size is not None:
            args.append(f"buffer_size={recipe.buffer_size!r}")
        return f"EchoDataset({', '.join([*args, f'seed={recipe.seed!r}'])})"
